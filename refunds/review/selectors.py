"""Reads of refunds, always scoped to a site."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404, QueryDict
from django.utils import timezone

from audit.selectors import records_about
from refunds.labels import (
    REASON_LABELS,
    buyer_label,
    credit_confirmation,
    failure_line,
    failure_words,
    humanize,
    labelled_rule,
    money_confirmation,
    money_words,
    outcome_label,
    rail_label,
    reason_label,
    refund_headline,
    refund_outcome_label,
    requester_label,
)
from refunds.models import Refund, RefundOrigin, RefundStatus
from refunds.review.decisions import deadline
from refunds.review.facts_words import RawFact, fact_phrases, raw_facts
from sill.accounts.models import AgentKey, Site
from sill.money import Money, MoneyError, exponent, format_money
from sill.orders.models import Charge, Order
from sill.rails.base import RailName
from sill.rails.models import RailAccount, RailMode

STAFF_FILTER = "staff"


# The nav's counter counts held refunds up to this many ("999+" past it): bounded work on
# every page however long the queue grows.
HELD_COUNTED = 999


def held_count_for(site: Site) -> int:
    """The site's held refunds, up to ``HELD_COUNTED + 1`` (more reads "999+")."""
    held = Refund.objects.filter(site=site, status=RefundStatus.HELD).order_by()
    return int(held[: HELD_COUNTED + 1].count())


# --- the held list ----------------------------------------------------------------------


@dataclass(frozen=True)
class HeldFilters:
    """The held list's filters, parsed from the query string (bad input is ignored)."""

    reason: str = ""
    agent: str = ""  # an agent id, or STAFF_FILTER for refunds staff members asked for
    amount_min: Decimal | None = None
    amount_max: Decimal | None = None

    @classmethod
    def from_query(cls, query: QueryDict) -> HeldFilters:
        return cls(
            reason=query.get("reason", "").strip()[:120],
            agent=query.get("agent", "").strip()[:100],
            amount_min=_decimal(query.get("amount_min", "")),
            amount_max=_decimal(query.get("amount_max", "")),
        )

    @property
    def active(self) -> bool:
        return bool(
            self.reason or self.agent or self.amount_min is not None or self.amount_max is not None
        )

    @property
    def query(self) -> str:
        """The filters as a query string (for the pager's links); "" without any."""
        values = {
            "reason": self.reason,
            "agent": self.agent,
            "amount_min": "" if self.amount_min is None else str(self.amount_min),
            "amount_max": "" if self.amount_max is None else str(self.amount_max),
        }
        return urlencode({k: v for k, v in values.items() if v})


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text.strip()[:30])
    except InvalidOperation:
        return None
    return value if value.is_finite() and value >= 0 else None


def held_refunds_for(site: Site, filters: HeldFilters | None = None) -> QuerySet[Refund]:
    """The site's held refunds, oldest first (the one that expires soonest on top)."""
    filters = filters or HeldFilters()
    qs = with_key_standing(
        Refund.objects.filter(site=site, status=RefundStatus.HELD).select_related(
            "order", "agent", "requested_by", "customer"
        )
    )
    if filters.reason:
        qs = qs.filter(Q(reason_code=filters.reason) | Q(reason_label=filters.reason))
    if filters.agent == STAFF_FILTER:
        qs = qs.filter(origin=RefundOrigin.STAFF)
    elif filters.agent:
        qs = qs.filter(agent__agent_id=filters.agent)
    if filters.amount_min is not None or filters.amount_max is not None:
        qs = qs.filter(_amount_between(site, filters.amount_min, filters.amount_max))
    return qs.order_by("created_at", "id")


def with_key_standing(refunds: QuerySet[Refund]) -> QuerySet[Refund]:
    """``refunds``, each with ``key_revoked``: whether the key that signed its mandate (an
    agent's) has been revoked since, which the held pages say beside the agent."""
    return refunds.annotate(
        key_revoked=Exists(
            AgentKey.objects.filter(
                agent_id=OuterRef("agent_id"),
                key_id=OuterRef("mandate__key_id"),
                revoked_at__isnull=False,
            )
        )
    )


def _amount_between(site: Site, low: Decimal | None, high: Decimal | None) -> Q:
    """Amounts are typed in major units; compare in each held currency's minor units."""
    currencies = (
        Refund.objects.filter(site=site, status=RefundStatus.HELD)
        .order_by()
        .values_list("currency", flat=True)
        .distinct()
    )
    match = Q(pk__in=[])
    for currency in currencies:
        try:
            scale = Decimal(10) ** exponent(currency)
        except MoneyError:
            continue
        clause = Q(currency=currency)
        if low is not None:
            clause &= Q(amount_minor__gte=_minor(low, scale, ROUND_CEILING))
        if high is not None:
            clause &= Q(amount_minor__lte=_minor(high, scale, ROUND_FLOOR))
        match |= clause
    return match


# Past any amount a refund can have (minor units are a 64-bit integer column).
_MAX_MINOR = 2**63 - 1


def _minor(major: Decimal, scale: Decimal, rounding: str) -> int:
    """``major`` in minor units, at most :data:`_MAX_MINOR`: a typed ``1e999999`` is a finite
    decimal, and scaling it would overflow the decimal context (a minimum past any amount
    then matches nothing, a maximum everything)."""
    if major.adjusted() > 20:
        return _MAX_MINOR
    return min(int((major * scale).to_integral_value(rounding)), _MAX_MINOR)


@dataclass(frozen=True)
class FilterOptions:
    reasons: list[tuple[str, str]]
    agents: list[tuple[str, str]]


# The filter pickers read the reasons and requesters of at most this many held refunds (the
# oldest, which expire first): bounded work on every page of the held list.
OPTIONS_SCANNED = 1000


def held_filter_options(site: Site) -> FilterOptions:
    """The reasons and requesters that occur among the site's held refunds (one query; the
    oldest ``OPTIONS_SCANNED`` of them when more wait)."""
    oldest = Refund.objects.filter(site=site, status=RefundStatus.HELD).order_by("created_at", "id")
    rows = (
        Refund.objects.filter(pk__in=oldest.values("pk")[:OPTIONS_SCANNED])
        .order_by()
        .values_list("reason_code", "reason_label", "agent__agent_id", "agent__name", "origin")
        .distinct()
    )
    reasons: dict[str, str] = {}
    agents: dict[str, str] = {}
    for code, label, agent_id, agent_name, origin in rows:
        value = code or label
        if value:
            reasons[value] = label or REASON_LABELS.get(code, humanize(code))
        if agent_id:
            # By the name the merchant gave it, as the rows (labels.requester_words).
            agents[agent_id] = f"{agent_name or agent_id} (agent)"
        elif origin == RefundOrigin.STAFF:
            agents[STAFF_FILTER] = "Staff members"
    return FilterOptions(
        reasons=sorted(reasons.items(), key=lambda item: item[1]),
        agents=sorted(agents.items(), key=lambda item: (item[0] == STAFF_FILTER, item[1])),
    )


@dataclass(frozen=True)
class HeldRow:
    """One held refund as the review pages show it."""

    refund: Refund
    headline: str
    reason: str
    requester: str
    requester_kind: str  # "agent" | "staff"
    deadline: datetime | None
    rail: str  # the rail's name as merchants know it ("Stripe", "Mock")
    overdue: bool = False
    just_held: bool = False  # less than a minute ago
    # Each rule as {"id", "action", "mode", "title", "action_label"} (words for the ids).
    rules: list[dict[str, Any]] = field(default_factory=list)
    buyer: str = ""  # "Ada (ada@example.com)"
    confirm: str = ""  # the sentence shown before approving moves money
    # Processing or needing attention: the row and the panel poll until it settles.
    in_flight: bool = False
    # An agent's: the key that signed its mandate was revoked since (with_key_standing).
    key_revoked: bool = False

    @property
    def noun(self) -> str:
        """``refund``, or ``credit`` for a customer credit (refunds.labels.money_words)."""
        return money_words(self.refund)[0]

    @property
    def approve_label(self) -> str:
        return f"Approve and {self.noun} {format_money(self.refund.amount)}"

    @property
    def reject_outcome(self) -> str:
        """What rejecting does, for the confirmation: "Nothing will be credited."."""
        return f"Nothing will be {money_words(self.refund)[1]}."


def held_row(refund: Refund) -> HeldRow:
    held = refund.status == RefundStatus.HELD
    due = deadline(refund) if held else refund.expires_at
    now = timezone.now()
    order = refund.order
    if refund.is_credit:
        customer = refund.customer
        email = customer.email if customer is not None else ""
        buyer = buyer_label(customer.name, email) if customer is not None else "the customer"
        confirm = credit_confirmation(amount=refund.amount, customer=buyer, email=email)
    else:
        buyer = buyer_label(order.buyer_name, order.buyer_email) if order else "the buyer"
        confirm = money_confirmation(
            amount=refund.amount,
            buyer=buyer,
            rail=refund.rail,
            email=order.buyer_email if order else "",
        )
    return HeldRow(
        refund=refund,
        headline=refund_headline(refund),
        reason=reason_label(refund),
        requester=requester_label(refund),
        requester_kind="agent" if refund.agent_id else "staff",
        deadline=due,
        rail=rail_label(refund.rail),
        overdue=held and due is not None and due <= now,
        just_held=now - refund.created_at < timedelta(minutes=1),
        rules=[labelled_rule(rule) for rule in holding_rules(refund)],
        buyer=buyer,
        confirm=confirm,
        in_flight=refund.status in IN_FLIGHT,
        key_revoked=bool(getattr(refund, "key_revoked", False)),
    )


IN_FLIGHT = (RefundStatus.PROCESSING, RefundStatus.NEEDS_ATTENTION)


@dataclass(frozen=True)
class HeldGroup:
    """The held refunds of one order, as the held list groups them (oldest first)."""

    order: Order | None
    rows: list[HeldRow]

    @property
    def total(self) -> Money | None:
        currencies = {row.refund.currency for row in self.rows}
        if len(currencies) != 1:
            return None
        return Money(sum(row.refund.amount_minor for row in self.rows), currencies.pop())


def group_by_order(rows: list[HeldRow]) -> list[HeldGroup]:
    """``rows`` grouped by order, each group where its oldest hold was (no queries)."""
    groups: dict[str, HeldGroup] = {}
    for row in rows:
        key = row.refund.order_id or f"refund:{row.refund.pk}"
        if key not in groups:
            groups[key] = HeldGroup(order=row.refund.order, rows=[])
        groups[key].rows.append(row)
    return list(groups.values())


def holding_rules(refund: Refund) -> list[dict[str, Any]]:
    """The rules that held the refund (those that asked for approval; else every one that fired)."""
    rules = [r for r in (refund.rules or []) if isinstance(r, dict) and r.get("id")]
    holding = [r for r in rules if r.get("action") == "require_approval"]
    return holding or rules


# --- one held refund --------------------------------------------------------------------


def held_refund_for(site: Site, refund_id: str) -> Refund:
    """A refund of ``site`` that was held for review (now or before); else 404."""
    refund = (
        with_key_standing(Refund.objects.filter(site=site, pk=refund_id, expires_at__isnull=False))
        .select_related("site", "order", "order__customer", "charge", "agent", "requested_by")
        .select_related("decided_by", "mandate", "customer")
        .first()
    )
    if refund is None:
        raise Http404("No such held refund on this site.")
    return refund


@dataclass(frozen=True)
class PriorRefund:
    refund: Refund
    words: str  # its outcome or reason in words ("Rejected by owner@…", "Defective")


def prior_refunds_for(refund: Refund) -> list[PriorRefund]:
    """The order's other refunds (Sill's and those reported from outside), oldest first."""
    if refund.order_id is None:
        return []
    prior = (
        Refund.objects.filter(site_id=refund.site_id, order_id=refund.order_id)
        .exclude(pk=refund.pk)
        .select_related("agent", "requested_by", "decided_by")
        .order_by("created_at", "id")
    )
    return [PriorRefund(refund=r, words=refund_outcome_label(r) or reason_label(r)) for r in prior]


_KIND_TONES = {
    "escalated": "warn",
    "approved": "ok",
    "escalated_approved": "ok",
    "rejected": "bad",
    "escalated_rejected": "bad",
    "settlement": "ok",
}


@dataclass(frozen=True)
class DecisionEntry:
    seq: int
    kind: str
    label: str
    at: datetime
    hash: str
    body: dict[str, Any]
    rules: list[dict[str, Any]] = field(default_factory=list)  # labelled (refunds.labels)
    reason: str = ""  # the record's outcome code in words (and a failure's rail message)

    @property
    def tone(self) -> str:
        if self.kind == "settlement" and self.body.get("outcome") == "failed":
            return "bad"
        return _KIND_TONES.get(self.kind, "muted")


def decision_records_for(refund: Refund) -> list[DecisionEntry]:
    """The audit records about ``refund``, in chain order (escalated, decision, settlement)."""
    entries = []
    for record in records_about(site=refund.site, refund_id=refund.pk):
        body = json.loads(record.payload).get("body", {})
        rules = body.get("rules") if isinstance(body.get("rules"), list) else []
        entries.append(
            DecisionEntry(
                seq=record.seq,
                kind=record.kind,
                label=record.get_kind_display(),
                at=record.created_at,
                hash=record.hash,
                body=body,
                rules=[labelled_rule(r) for r in rules if isinstance(r, dict)],
                reason=_record_reason(record.kind, body),
            )
        )
    return entries


def _record_reason(kind: str, body: dict[str, Any]) -> str:
    """A record's outcome in words; a failed settlement's in Sill's words, then the rail's
    message it kept, as the refund page says it (``Declined by the rail. mock rail: …``)."""
    reason = body.get("reason")
    if not isinstance(reason, str):
        return ""
    if kind == "settlement" and body.get("outcome") == "failed":
        return failure_line(*failure_words(reason, str(body.get("message") or "")))
    return outcome_label(reason)


@dataclass(frozen=True)
class ExternalLink:
    url: str
    label: str


def charge_link(charge: Charge | None) -> ExternalLink | None:
    """Where the merchant sees ``charge`` at its provider (test or live dashboard)."""
    if charge is None:
        return None
    account = RailAccount.objects.filter(site_id=charge.order.site_id, rail=charge.rail).first()
    live = account is not None and account.mode == RailMode.LIVE
    if charge.rail in (RailName.STRIPE, RailName.WOOCOMMERCE):
        # WooCommerce stores are paid on Stripe (see the seed), so the charge lives there.
        payment = charge.provider_payment_id or charge.provider_charge_id
        if not payment:
            return None
        base = "https://dashboard.stripe.com/" + ("" if live else "test/")
        return ExternalLink(f"{base}payments/{payment}", "View in the Stripe dashboard")
    if charge.rail == RailName.SHOPIFY:
        # The order's own shop: the one connected now holds no order of an earlier one.
        shop = charge.provider_account or _shopify_domain(account)
        if not shop or not charge.provider_payment_id:
            return None
        return ExternalLink(
            f"https://{shop}/admin/orders/{charge.provider_payment_id}", "View in Shopify admin"
        )
    if charge.rail == RailName.PAYPAL and charge.provider_charge_id:
        host = "www.paypal.com" if live else "www.sandbox.paypal.com"
        return ExternalLink(
            f"https://{host}/activity/payment/{charge.provider_charge_id}", "View in PayPal"
        )
    return None


def _shopify_domain(account: RailAccount | None) -> str:
    if account is None:
        return ""
    for candidate in (account.connected_account, account.api_base):
        found = re.search(r"([a-z0-9][a-z0-9-]*\.myshopify\.com)", candidate or "")
        if found:
            return found.group(1)
    return ""


def fact_rows(refund: Refund) -> list[RawFact]:
    """The facts the policy read when it held the refund, each labelled (the folded list)."""
    return raw_facts(refund.facts if isinstance(refund.facts, dict) else {})


def fact_words(refund: Refund) -> list[str]:
    """The same facts as phrases for the decider ("100% of the order", "paid today")."""
    facts = refund.facts if isinstance(refund.facts, dict) else {}
    return fact_phrases(facts, credit=refund.is_credit)
