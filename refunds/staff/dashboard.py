"""What the dashboard reads: the to-do strip, 30 days of refunds, and the setup checklist.

Every figure is one aggregate query (or one bounded read), so the dashboard's query count
does not grow with the number of refunds (``tests/orders/test_dashboard.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import TruncDate
from django.urls import reverse
from django.utils import timezone

from refunds.labels import REASON_LABELS, humanize
from refunds.models import Decision, ReconciliationItem, Refund, RefundReason, RefundStatus
from refunds.staff import charts
from refunds.staff.listing import open_failure
from sill.accounts.access import Cap, SiteContext
from sill.accounts.models import AgentKey, Membership, Site
from sill.rails.models import RailAccount

DAYS = 30
TOP_REASONS = 5
# The approval-latency read looks at no more than this many decisions (one bounded query).
LATENCY_SAMPLE = 2000
ORIGINS = ["agent", "staff"]
OUTCOME_WORDS = {
    Decision.APPROVED: "Approved by the rules",
    Decision.ESCALATED: "Held for review",
    Decision.REJECTED: "Rejected by the rules",
}


@dataclass(frozen=True)
class Todo:
    key: str
    label: str
    count: int
    url: str
    tone: str  # "bad" | "warn" | "info"


@dataclass(frozen=True)
class SetupStep:
    label: str
    done: bool
    url: str
    hint: str


def _held_by_the_rules() -> Q:
    """Refunds a rule held for review, decided since or not. A decision overwrites
    ``decision`` (approved or rejected by whoever decided it, or rejected when it expired), so
    "escalated" alone counts only those still held: a person's decision, or the expiry, is
    not the rules'."""
    return (
        Q(decision=Decision.ESCALATED)
        | Q(decided_by__isnull=False)
        | Q(status=RefundStatus.EXPIRED)
    )


def _counts(site: Site, since: Any) -> dict[str, int]:
    window = Q(created_at__gte=since)
    held = _held_by_the_rules()
    return Refund.objects.filter(site=site).aggregate(
        held=Count("id", filter=Q(status=RefundStatus.HELD)),
        attention=Count("id", filter=Q(status=RefundStatus.NEEDS_ATTENTION)),
        failed=Count("id", filter=open_failure()),
        approved=Count("id", filter=window & Q(decision=Decision.APPROVED) & ~held),
        escalated=Count("id", filter=window & held),
        rejected=Count("id", filter=window & Q(decision=Decision.REJECTED) & ~held),
    )


def todo_strip(
    ctx: SiteContext, counts: dict[str, int], to_reconcile: int, charges: int = 0
) -> list[Todo]:
    """The counts that ask for someone, each linking to its list (only the viewer's lists).

    ``charges``: the purchases' charges that need attention, shown to owners and admins
    (who see them listed on the dashboard) only while there are any: a site that takes no
    purchases never has one, and a zero would only ask what it means."""
    refunds = reverse("refunds:list")
    items = []
    if ctx.can(Cap.VIEW_HELD):
        held = reverse("refunds:held")
        items.append(Todo("held", "Held for review", counts["held"], held, "warn"))
    items.append(
        Todo("attention", "Need attention", counts["attention"],
             f"{refunds}?status=needs_attention", "bad")
    )  # fmt: skip
    items.append(
        Todo("failed", "Failed, not refunded again", counts["failed"],
             f"{refunds}?status=failed_open", "bad")
    )  # fmt: skip
    if ctx.can(Cap.DECIDE_HELD) and charges:
        items.append(
            Todo("charges", "Charges need attention", charges,
                 reverse("orders:dashboard") + "#dashboard-charge-attention", "bad")
        )  # fmt: skip
    if ctx.can(Cap.DECIDE_HELD):
        items.append(
            Todo("reconcile", "To reconcile", to_reconcile, reverse("refunds:reconcile"), "info")
        )
    return items


def _per_day(site: Site, since: Any) -> charts.DayChart:
    zone = site.zone
    rows = (
        Refund.objects.filter(site=site, created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day", "origin")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[Any, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row["day"], {})[row["origin"]] = row["n"]
    today = timezone.localtime(timezone.now(), zone).date()
    days = [today - timedelta(days=offset) for offset in range(DAYS - 1, -1, -1)]
    return charts.day_chart(days, counts, ORIGINS)


def _latency(site: Site, since: Any) -> dict[str, str | int]:
    # A held refund a person decided names them (``decided_by``); its ``decision`` is then
    # theirs (approved or rejected), no longer "escalated". Expired ones name nobody.
    pairs = list(
        Refund.objects.filter(site=site, decided_at__gte=since, decided_by__isnull=False)
        .order_by("-decided_at")
        .values_list("created_at", "decided_at")[:LATENCY_SAMPLE]
    )
    seconds = [(decided - held).total_seconds() for held, decided in pairs if decided]
    return {
        "count": len(seconds),
        "median": charts.duration_text(charts.percentile(seconds, 0.5)),
        "p90": charts.duration_text(charts.percentile(seconds, 0.9)),
    }


def _top_reasons(site: Site, since: Any) -> list[charts.Bar]:
    rows = (
        Refund.objects.filter(site=site, created_at__gte=since)
        .values("reason_label", "reason_code")
        .annotate(n=Count("id"))
        .order_by("-n", "reason_label", "reason_code")[:TOP_REASONS]
    )
    items = []
    for row in rows:
        code = row["reason_code"]
        label = row["reason_label"] or (REASON_LABELS.get(code, humanize(code)) if code else "")
        items.append((label or "No reason given", row["n"]))
    return charts.bars(items)


def setup_steps(site: Site) -> list[SetupStep]:
    """Connect a rail, reasons, a colleague, an agent key: each done or not (one query)."""
    flags = (
        Site.objects.filter(pk=site.pk)
        .annotate(
            has_rail=Exists(RailAccount.objects.filter(site=OuterRef("pk"), enabled=True)),
            has_reasons=Exists(RefundReason.objects.filter(site=OuterRef("pk"), active=True)),
            has_colleague=Exists(
                Membership.objects.filter(site=OuterRef("pk")).exclude(role="owner")
            ),
            has_key=Exists(
                AgentKey.objects.filter(agent__site=OuterRef("pk"), revoked_at__isnull=True)
            ),
        )
        .values("has_rail", "has_reasons", "has_colleague", "has_key")
        .get()
    )
    return [
        SetupStep("Connect a payment rail", flags["has_rail"], reverse("settings:rails"),
                  "Stripe, PayPal, Shopify or WooCommerce: where refunds are paid out."),
        SetupStep("Set up refund reasons", flags["has_reasons"], reverse("refunds:reasons"),
                  "The reasons staff pick when they refund."),
        SetupStep("Invite a colleague", flags["has_colleague"], reverse("settings:members"),
                  "An admin or reviewer to approve held refunds."),
        SetupStep("Add an agent key", flags["has_key"], reverse("settings:agents"),
                  "So a shopping agent can ask for refunds."),
    ]  # fmt: skip


def dashboard_context(ctx: SiteContext, *, charges_needing_attention: int = 0) -> dict[str, Any]:
    """Everything the dashboard draws beyond the headline figures (a fixed number of queries);
    ``charges_needing_attention`` goes to the to-do strip (:func:`todo_strip`)."""
    site = ctx.site
    since = timezone.now() - timedelta(days=DAYS)
    counts = _counts(site, since)
    to_reconcile = (
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=True).count()
        if ctx.can(Cap.DECIDE_HELD)
        else 0
    )
    outcomes = charts.bars([(words, counts[decision]) for decision, words in OUTCOME_WORDS.items()])
    top_reasons = _top_reasons(site, since)
    steps = setup_steps(site) if ctx.can(Cap.MANAGE_SETTINGS) else []
    return {
        "todos": todo_strip(ctx, counts, to_reconcile, charges_needing_attention),
        "per_day": _per_day(site, since),
        "latency": _latency(site, since),
        "top_reasons": top_reasons,
        "top_reasons_height": charts.bars_height(top_reasons),
        "outcomes": outcomes,
        "outcomes_height": charts.bars_height(outcomes),
        "outcomes_total": sum(bar.value for bar in outcomes),
        "setup_steps": steps,
        "setup_needed": any(not step.done for step in steps),
        "days": DAYS,
        "can_view_held": ctx.can(Cap.VIEW_HELD),
    }
