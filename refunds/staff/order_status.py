"""The order page's refund status area: holds waiting, refunds in flight, failures, news.

It is a partial of the order page (``orders/detail.html#refund_status``) that polls itself
every 3 s while a refund is processing or needs attention, and stops (the answer carries no
trigger) once nothing is in flight; a refund the rail settled meanwhile shows as news.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from refunds.labels import outcome_words
from refunds.models import Refund, RefundStatus
from refunds.services import BOOKS_BEHIND_CODES
from refunds.staff.listing import SUPERSEDING, failed_since
from sill.accounts.access import Cap, SiteContext
from sill.orders.models import Order

# A settled refund stays in the status area this long, so a poll shows it arrive.
RECENT = timedelta(minutes=15)


@dataclass(frozen=True)
class Failure:
    refund: Refund
    what: str  # the outcome code in words
    detail: str  # the rail's own message, when it adds something
    next_step: str
    link: str  # where the next step happens ("" for the form below)
    link_text: str
    # Where an owner or admin marks it handled (refunds.staff.handled); "" for the others.
    handled_url: str = ""


@dataclass(frozen=True)
class RefundStatusArea:
    held: list[tuple[Refund, str]]  # (refund, its review page or "")
    processing: list[Refund]
    attention: list[Failure]  # next_step/link unused: the template words it
    failures: list[Failure]
    settled: list[Refund]
    reconcile_url: str

    @property
    def polling(self) -> bool:
        return bool(self.processing or self.attention)

    @property
    def empty(self) -> bool:
        return not (self.held or self.processing or self.attention or self.failures or self.settled)


def _next_step(refund: Refund, ctx: SiteContext) -> tuple[str, str, str]:
    """What to do about a failed refund, for this viewer: (sentence, link, link text)."""
    if not ctx.can(Cap.REFUND):
        return (
            "An owner, an admin or a staff member who may refund can refund it again.",
            "",
            "",
        )
    if refund.outcome_code == "rail_disabled" and ctx.can(Cap.MANAGE_SETTINGS):
        return (
            "Switch the rail back on, or connect it as the words above say, then refund "
            "again from the form below.",
            reverse("settings:rails"),
            "Rail settings",
        )
    if refund.outcome_code == "failed_after_settlement":
        return (
            "The money came back to you. Check with the buyer (their card may be closed), then "
            "refund again from the form below or another way.",
            "",
            "",
        )
    if refund.outcome_code in BOOKS_BEHIND_CODES:
        # Sill reads the charge from the rail on this failure (refunds.services.fail_refund):
        # what was refunded outside Sill shows, and the form offers only what is left.
        return (
            "Nothing moved through Sill: the rail already holds a refund or dispute of this "
            "payment made outside Sill, which the Transactions tab lists once Sill has read it. "
            "Check what is still due before refunding again.",
            "",
            "",
        )
    return ("Nothing moved. Refund again from the form below.", "", "")


def _open_failures(refunds: list[Refund]) -> list[Refund]:
    """Failed refunds no refund of the order asked for since replaced (moving or moved money)
    and nobody marked handled: the lists' ``superseded``, on the refunds the page loaded."""
    return [
        r
        for r in refunds
        if r.status == RefundStatus.FAILED
        and r.failure_handled_at is None
        and not any(o.status in SUPERSEDING and o.created_at > failed_since(r) for o in refunds)
    ]


def _words(refund: Refund, step: tuple[str, str, str]) -> Failure:
    return Failure(refund, *outcome_words(refund), *step)


def refund_status_area(ctx: SiteContext, refunds: Iterable[object]) -> RefundStatusArea:
    """The status area for ``refunds`` (the order's, already loaded), as ``ctx`` may see it."""
    mine = [r for r in refunds if isinstance(r, Refund)]
    can_view_held = ctx.can(Cap.VIEW_HELD)
    recent = timezone.now() - RECENT
    may_mark = ctx.can(Cap.DECIDE_HELD)
    failures = [
        replace(
            _words(r, _next_step(r, ctx)),
            handled_url=reverse("refunds:failure-handled", args=[r.pk]) if may_mark else "",
        )
        for r in _open_failures(mine)
    ]
    return RefundStatusArea(
        held=[
            (r, reverse("refunds:held-detail", args=[r.pk]) if can_view_held else "")
            for r in mine
            if r.status == RefundStatus.HELD
        ],
        processing=[r for r in mine if r.status == RefundStatus.PROCESSING],
        attention=[
            _words(r, ("", "", "")) for r in mine if r.status == RefundStatus.NEEDS_ATTENTION
        ],
        failures=failures,
        settled=[
            r
            for r in mine
            if r.status == RefundStatus.SUCCEEDED and r.settled_at and r.settled_at >= recent
        ],
        reconcile_url=reverse("refunds:reconcile") if ctx.can(Cap.DECIDE_HELD) else "",
    )


def order_refunds(order: Order) -> list[Refund]:
    """The order's refunds, newest first (one query): what a poll of the status area reads."""
    return list(order.refunds.order_by("-created_at", "-id"))
