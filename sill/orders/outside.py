"""What a rail reports happened to a charge outside Sill: refunds and disputes.

Webhook processing (e.g. sill.rails.stripe_webhooks) calls these with facts already parsed
from the rail's event. Each change happens under the order's and the charge's row locks (the
same order refund settlement takes them in) and writes its signed audit record in the same
transaction. Nothing here starts a money movement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from audit.models import AuditKind
from audit.services import append_record
from sill.money import Money, MoneyError, recordable
from sill.orders.models import (
    OPEN_DISPUTE_STATUSES,
    Charge,
    Dispute,
    DisputeStatus,
    ExternalRefund,
    Order,
)
from sill.orders.services import refresh_refund_status
from sill.rails.base import RailRefund

# Rail refund states that hold money (pending ones may still fail; they count until they do).
COUNTED_STATES = frozenset({"pending", "requires_action", "succeeded"})

# How far along a rail refund is. Its states only go forward (pending → succeeded → failed or
# canceled; nothing comes back from failed or canceled), so of two events with the same time
# the one further along is the later. A state not listed here counts as the least advanced.
_REFUND_PROGRESS = {"pending": 0, "requires_action": 0, "succeeded": 1, "failed": 2, "canceled": 2}


class ExceedsCharge(Exception):
    """An outside refund that, beside the refunds Sill counts, would exceed the charge.

    The rail never refunds more than it charged, so Sill's own books count a refund the rail
    does not have. Nothing is written: a webhook's attempt fails with this (kept on the
    event, retried, given up loudly), and reconciliation, which catches it, shows the
    outside refund and Sill's refund the rail lacks as two differences. ``charge_id``: the
    charge, for the webhook's attempt to have it reconciled (sill.rails.event_attempts)."""

    def __init__(self, message: str, *, charge_id: str) -> None:
        super().__init__(message)
        self.charge_id = charge_id


# The id of Sill's own refund of a charge that a rail refund id is, or "" when it is none of
# Sill's. The refund core registers its lookup at startup (refunds.apps): sill/ never imports
# the apps built on it.
OwnRefundFinder = Callable[[Charge, str], str]
_own_refund_finders: list[OwnRefundFinder] = []


def register_own_refund_finder(finder: OwnRefundFinder) -> None:
    if finder not in _own_refund_finders:
        _own_refund_finders.append(finder)


# What the rail reports about one of Sill's own refunds (its metadata names it): the refund
# core registers the handler (refunds.apps) that acts on a late failure. Returns what it did.
OwnRefundReport = Callable[[Charge, RailRefund, str], str]
_own_refund_reports: list[OwnRefundReport] = []


def register_own_refund_report(handler: OwnRefundReport) -> None:
    if handler not in _own_refund_reports:
        _own_refund_reports.append(handler)


def report_own_refund(*, charge: Charge, refund: RailRefund, event_id: str) -> str:
    """Hand the rail's report on one of Sill's refunds to the refund core."""
    outcomes = [handle(charge, refund, event_id) for handle in _own_refund_reports]
    return "; ".join(outcomes) or "Sill's own refund"


def own_refund_id(charge: Charge, provider_refund_id: str) -> str:
    """The id of Sill's refund of ``charge`` that the rail's ``provider_refund_id`` is (Sill
    settled it under that id), or ``""``."""
    for find in _own_refund_finders:
        if found := find(charge, provider_refund_id):
            return found
    return ""


def unrecorded_refunded_minor(charge: Charge, rail_refunded_minor: int | None) -> int:
    """What the rail counts as refunded on ``charge`` beyond everything Sill has recorded.

    Sill's reservations count as recorded: a refund being executed may already be in the
    rail's figure. Positive means a refund was made outside Sill and not reported yet.
    """
    if rail_refunded_minor is None:
        return 0
    known = (
        charge.amount_refunded_minor
        + charge.amount_refunded_outside_minor
        + charge.amount_reserved_minor
    )
    return max(0, rail_refunded_minor - known)


@dataclass(frozen=True)
class OutsideRefund:
    provider_refund_id: str
    amount_minor: int
    currency: str
    status: str
    created_at_rail: datetime
    reason: str = ""
    failure_reason: str = ""

    @classmethod
    def of(cls, listed: RailRefund) -> OutsideRefund:
        """The refund ``listed`` as the rail reports it, as one made outside Sill."""
        return cls(
            provider_refund_id=listed.provider_refund_id,
            amount_minor=listed.amount_minor,
            currency=listed.currency,
            status=listed.status,
            created_at_rail=listed.created_at,
            reason=listed.reason,
            failure_reason=listed.failure_reason,
        )

    def as_sills(self, sill_refund_id: str) -> RailRefund:
        """This refund as the rail's report of Sill's refund ``sill_refund_id``."""
        return RailRefund(
            provider_refund_id=self.provider_refund_id,
            amount_minor=self.amount_minor,
            currency=self.currency,
            status=self.status,
            created_at=self.created_at_rail,
            sill_refund_id=sill_refund_id,
            reason=self.reason,
            failure_reason=self.failure_reason,
        )


# How much of a rail's dispute status word Sill keeps (Dispute.rail_status).
RAIL_STATUS_MAX = 40


@dataclass(frozen=True)
class ReportedDispute:
    """A dispute as the rail reports it. ``amount_minor`` None (``currency`` ""): the rail's
    amount could not be read; the dispute is recorded all the same, as it refuses refunds."""

    provider_dispute_id: str
    reason: str
    amount_minor: int | None
    currency: str
    status: DisputeStatus
    rail_status: str
    opened_at: datetime


def record_rail_refund(
    *, charge: Charge, refund: RailRefund, event_id: str, event_at: datetime
) -> str:
    """Record what the rail reports of one refund of ``charge`` (a webhook's or a read's,
    ``event_at`` its time); returns what was done. One whose marker names Sill's refund goes
    to the refund core (:func:`report_own_refund`); any other is a refund made outside Sill
    (:func:`record_outside_refund`, which may raise :class:`ExceedsCharge`). Every rail's
    webhook and reconciliation go through here, so a refund ends the same whichever reported
    it."""
    if refund.sill_refund_id:
        return report_own_refund(charge=charge, refund=refund, event_id=event_id)
    return record_outside_refund(
        charge=charge, refund=OutsideRefund.of(refund), event_id=event_id, event_at=event_at
    )


def _locked(charge: Charge) -> tuple[Order, Charge]:
    order = Order.objects.select_for_update().get(pk=charge.order_id)
    return order, Charge.objects.select_for_update().get(pk=charge.pk)


def record_outside_refund(
    *, charge: Charge, refund: OutsideRefund, event_id: str, event_at: datetime
) -> str:
    """Record or update an outside refund of ``charge``; returns what was done.

    The caller has already excluded refunds whose metadata names a Sill refund; a refund
    whose provider id Sill settled is excluded here, under the charge's lock (settlement
    takes it too). An event older than the newest one applied to this refund changes nothing,
    nor does one of the same time whose state is less advanced than the applied one (a
    ``succeeded`` never undoes a ``failed`` of the same second).
    """
    if refund.currency != charge.currency:
        return f"ignored: refund currency {refund.currency} is not the charge's"
    if refund.amount_minor <= 0:
        # A refund that returns no money (Shopify: items restocked only) lowers nothing.
        return "ignored: the refund returns no money"
    if refund.status not in COUNTED_STATES and (
        sill_refund_id := own_refund_id(charge, refund.provider_refund_id)
    ):
        # Sill settled this refund, and the rail now reports it failed or canceled without
        # its marker (metadata edited in the dashboard): the refund core reverses it, as it
        # does a marked one. Asked before the locks below: the reversal takes its own, and a
        # refund not settled yet is not found here (its settlement reads the record below).
        return report_own_refund(
            charge=charge, refund=refund.as_sills(sill_refund_id), event_id=event_id
        )
    with transaction.atomic():
        order, charge = _locked(charge)
        if own_refund_id(charge, refund.provider_refund_id):
            return "Sill's own refund (by provider id)"
        existing = (
            ExternalRefund.objects.select_for_update()
            .filter(charge=charge, provider_refund_id=refund.provider_refund_id)
            .first()
        )
        if existing is not None and _older(
            event_at,
            existing.rail_updated_at,
            behind=_progress(refund.status) < _progress(existing.status),
        ):
            return "unchanged: a newer event was already applied"
        counted = refund.amount_minor if refund.status in COUNTED_STATES else 0
        before = existing.counted_minor if existing is not None else 0
        if existing is not None and existing.status == refund.status and before == counted:
            ExternalRefund.objects.filter(pk=existing.pk).update(rail_updated_at=event_at)
            return "unchanged"
        outside_after = charge.amount_refunded_outside_minor + counted - before
        if charge.amount_refunded_minor > charge.amount_minor - outside_after:
            raise ExceedsCharge(
                f"outside refund {refund.provider_refund_id} ({refund.amount_minor} minor "
                f"units) would exceed charge {charge.pk} ({charge.amount_minor}) beside the "
                f"{charge.amount_refunded_minor} Sill counts refunded and the "
                f"{charge.amount_refunded_outside_minor} counted outside it",
                charge_id=charge.pk,
            )
        row = existing or ExternalRefund(
            charge=charge, provider_refund_id=refund.provider_refund_id
        )
        row.amount_minor = refund.amount_minor
        row.currency = refund.currency
        row.counted_minor = counted
        row.status = refund.status
        row.reason = refund.reason[:100]
        row.created_at_rail = refund.created_at_rail
        row.rail_updated_at = event_at
        row.save()
        if counted != before:
            Charge.objects.filter(pk=charge.pk).update(
                amount_refunded_outside_minor=F("amount_refunded_outside_minor") + counted - before
            )
            charge.refresh_from_db(fields=["amount_refunded_outside_minor"])
            refresh_refund_status(order)
        _record_external_refund(
            order,
            charge,
            refund.provider_refund_id,
            amount_minor=refund.amount_minor,
            currency=refund.currency,
            status=refund.status,
            counted_minor=counted,
            event_id=event_id,
        )
    return "external refund recorded" if existing is None else "external refund updated"


def claim_outside_refund(
    *, order: Order, charge: Charge, provider_refund_id: str, refund_id: str
) -> ExternalRefund | None:
    """The rail answered Sill's refund ``refund_id`` with ``provider_refund_id``, which is
    recorded on ``charge`` as a refund made outside Sill: it is Sill's own after all.

    The rail reported it without Sill's marker (Stripe metadata edited in the dashboard, a
    Shopify note changed, a PayPal refund without ``custom_id``) before Sill settled it. The
    rail's answer for Sill's idempotency key is authoritative, so the record is taken off the
    charge: what it counted outside Sill stops counting (the settlement counts it as Sill's),
    the row is deleted, and a signed ``external_refund`` record says so, naming Sill's refund
    by ``refund_id`` (its subject, so the refund's evidence bundle and Activity's refund filter
    list it); the earlier record that counted it stays in the chain. Returns the row as it was (its
    ``status`` says whether the rail reported it failed), or None when there is none.

    The caller holds the order's and the charge's row locks (settlement), which
    :func:`record_outside_refund` takes too: whichever comes second sees the other.
    """
    row = (
        ExternalRefund.objects.select_for_update()
        .filter(charge=charge, provider_refund_id=provider_refund_id)
        .first()
    )
    if row is None:
        return None
    row.delete()
    if row.counted_minor:
        Charge.objects.filter(pk=charge.pk).update(
            amount_refunded_outside_minor=F("amount_refunded_outside_minor") - row.counted_minor
        )
    charge.refresh_from_db(fields=["amount_refunded_outside_minor"])
    _record_external_refund(
        order,
        charge,
        provider_refund_id,
        amount_minor=row.amount_minor,
        currency=row.currency,
        status=row.status,
        counted_minor=0,
        uncounted_minor=row.counted_minor,
        refund_id=refund_id,
        outcome="Sill's own refund, reported without its marker: no longer counted outside Sill",
    )
    return row


def _record_external_refund(
    order: Order, charge: Charge, provider_refund_id: str, **facts: Any
) -> None:
    """The signed ``external_refund`` record of what a refund of ``charge`` made outside Sill
    counts now (``facts``: its amount, currency, status, ``counted_minor`` and what else the
    caller says), with the charge's total refunded outside Sill after it."""
    append_record(
        site=order.site,
        kind=AuditKind.EXTERNAL_REFUND,
        body={
            "order_id": order.pk,
            "charge_id": charge.pk,
            "rail": charge.rail,
            "provider_refund_id": provider_refund_id,
            **facts,
            "refunded_outside_minor": charge.amount_refunded_outside_minor,
        },
    )


def record_dispute(
    *, charge: Charge, dispute: ReportedDispute, event_id: str, event_at: datetime
) -> str:
    """Record or update a dispute the rail reported on ``charge``; returns what was done.

    An amount the books cannot hold (none, not whole minor units of a currency Sill knows,
    negative, past what a signed record holds) is recorded as not known: the dispute itself
    is recorded all the same, since it is what refuses refunds of the charge."""
    # The rail's own word is kept for people to read, as much of it as the column holds:
    # "RESOLVED:<outcome>" with an outcome code PayPal added later failed to write at all.
    # Cut before it is compared, so that an unchanged dispute reads as unchanged.
    dispute = replace(
        dispute, rail_status=dispute.rail_status[:RAIL_STATUS_MAX], **_known_amount(dispute)
    )
    with transaction.atomic():
        order, charge = _locked(charge)
        existing = (
            Dispute.objects.select_for_update()
            .filter(charge=charge, provider_dispute_id=dispute.provider_dispute_id)
            .first()
        )
        if (
            existing is not None
            and existing.rail_updated_at is not None
            and _older(
                event_at,
                existing.rail_updated_at,
                behind=dispute.status in OPEN_DISPUTE_STATUSES,
            )
        ):
            return "unchanged: a newer event was already applied"
        known = existing.amount_minor if existing is not None else None
        if dispute.amount_minor is None and existing is not None and known is not None:
            # A later report whose amount Sill cannot read keeps the amount Sill knew.
            dispute = replace(dispute, amount_minor=known, currency=existing.currency)
        if existing is not None and (
            existing.status,
            existing.rail_status,
            existing.amount_minor,
            existing.reason,
        ) == (dispute.status, dispute.rail_status, dispute.amount_minor, dispute.reason[:100]):
            Dispute.objects.filter(pk=existing.pk).update(rail_updated_at=event_at)
            return "unchanged"
        row = existing or Dispute(charge=charge, provider_dispute_id=dispute.provider_dispute_id)
        row.reason = dispute.reason[:100]
        row.amount_minor = dispute.amount_minor
        row.currency = dispute.currency
        row.status = dispute.status
        row.rail_status = dispute.rail_status
        row.opened_at = existing.opened_at if existing is not None else dispute.opened_at
        row.rail_updated_at = event_at
        row.save()
        append_record(
            site=order.site,
            kind=AuditKind.DISPUTE,
            body={
                "order_id": order.pk,
                "charge_id": charge.pk,
                "rail": charge.rail,
                "provider_dispute_id": dispute.provider_dispute_id,
                "reason": row.reason,
                # Both null when the amount is not known.
                "amount_minor": dispute.amount_minor,
                "currency": dispute.currency or None,
                "status": str(dispute.status),
                "rail_status": dispute.rail_status,
                "event_id": event_id,
            },
        )
    done = "dispute recorded" if existing is None else "dispute updated"
    return done if dispute.amount_minor is not None else f"{done}, its amount not known"


def _known_amount(dispute: ReportedDispute) -> dict[str, Any]:
    """The dispute's ``amount_minor`` and ``currency`` as the books hold them: both, or
    neither (None and "") when the rail's amount is not one they can hold."""
    try:
        if dispute.amount_minor is not None and dispute.amount_minor >= 0:
            money = recordable(Money(dispute.amount_minor, dispute.currency))
            return {"amount_minor": money.amount_minor, "currency": money.currency}
    except (MoneyError, TypeError):
        pass
    return {"amount_minor": None, "currency": ""}


def _older(event_at: datetime, applied_at: datetime, *, behind: bool) -> bool:
    """Whether an event is older than the one applied. Events of the same time are common
    (Stripe's ``created`` has one-second resolution, and Stripe delivers each event on its own
    schedule): then ``behind``, the event's state being less advanced than the applied one,
    makes it the older."""
    return event_at < applied_at or (event_at == applied_at and behind)


def _progress(status: str) -> int:
    return _REFUND_PROGRESS.get(status, 0)
