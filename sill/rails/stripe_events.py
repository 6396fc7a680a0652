"""Processing of stored Stripe events (the ``rails.process_stripe_event`` task).

Each event is applied once, under its row lock: outside refunds and disputes are recorded on
the charge (sill.orders.outside). Sill's own refunds carry ``metadata.sill_refund_id``
(sill.rails.stripe): such a refund is never an outside refund, whatever state Sill's record
of it is in, so the webhook for a refund the worker has not settled yet never counts twice.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from sill.money import MAX_RECORDABLE_MINOR
from sill.orders.models import Charge, Rail
from sill.orders.outside import (
    ExceedsCharge,
    ReportedDispute,
    record_dispute,
    record_rail_refund,
    unrecorded_refunded_minor,
)
from sill.queue import enqueue_on_commit
from sill.rails.base import RailRefund
from sill.rails.dispute_states import dispute_status
from sill.rails.models import WebhookEvent
from sill.rails.stripe import dispute_money, from_stripe_amount

# ``charge.refund.updated`` carries a Refund too: it is the only report of a charge's refund
# changing (failed, canceled) that endpoints on API versions before 2024-10-28 get, since
# Stripe sent them ``refund.*`` only for refunds without a charge.
REFUND_EVENTS = frozenset(
    {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}
)
DISPUTE_EVENTS = frozenset(
    {
        "charge.dispute.created",
        "charge.dispute.updated",
        "charge.dispute.closed",
        "charge.dispute.funds_withdrawn",
        "charge.dispute.funds_reinstated",
    }
)


def process_event(event_pk: int) -> str:
    """Apply one stored event once; returns (and stores) what was done.

    A refund the books cannot hold beside the refunds Sill counts (``ExceedsCharge``) fails
    the event: kept, retried, given up loudly (sill.rails.event_attempts). In a
    ``charge.refunded`` listing several, the others are facts the rail reports and are
    recorded all the same (committed), and the event then fails for that one, as its own
    ``refund.created`` would: the event's retries apply it once Sill's books hold it."""
    refused: list[ExceedsCharge] = []
    with transaction.atomic():
        stored = WebhookEvent.objects.select_for_update().get(pk=event_pk)
        if stored.processed_at is not None:
            return stored.outcome
        event = json.loads(stored.payload)
        outcome = _apply(stored, event, refused)
        if not refused:
            stored.processed_at = timezone.now()
            stored.outcome = outcome[:300]
            stored.save(update_fields=["processed_at", "outcome"])
    if refused:
        raise refused[0]
    return outcome


def _apply(stored: WebhookEvent, event: dict[str, Any], refused: list[ExceedsCharge]) -> str:
    if stored.type not in REFUND_EVENTS | DISPUTE_EVENTS | {"charge.refunded"}:
        return "ignored: not an event Sill records"
    # A signed body is Stripe's, but its shapes are still checked: a ``data``, ``object`` or
    # list that is not one raised on every attempt, ending in a give-up instead of an outcome.
    obj = _mapping(_mapping(event.get("data")).get("object"))
    if not obj:
        return "ignored: the event carries no object"
    event_at = _time(event.get("created"))
    if stored.type in REFUND_EVENTS:
        return _apply_refund(stored, obj, event_at)
    if stored.type == "charge.refunded":
        listed = _mapping(obj.get("refunds")).get("data") or []
        if not listed:
            return _unlisted_refunds(stored, obj, api_version=event.get("api_version"))
        if not isinstance(listed, list):
            return "malformed refund list on the charge"
        outcomes = [
            _apply_listed_refund(stored, {"charge": obj.get("id"), **refund}, event_at, refused)
            if isinstance(refund, dict)
            else "malformed refund"
            for refund in listed
        ]
        return "; ".join(outcomes)
    return _apply_dispute(stored, obj, event_at)


# The API version from which Stripe sends ``refund.created`` for every refund, a charge's too.
REFUND_EVENTS_FOR_CHARGES = "2024-10-28"


def _unlisted_refunds(stored: WebhookEvent, charge_obj: dict[str, Any], *, api_version: Any) -> str:
    """A ``charge.refunded`` without the charge's refunds (API versions from 2022-11-15 leave
    them out). From 2024-10-28 each refund's ``refund.created`` carries it. Before, Stripe
    sends none for a charge's refund: when Stripe counts more refunded than Sill's books hold,
    the charge's refunds are read from Stripe after commit (``refunds.catch_up_charge``), so a
    dashboard refund is recorded now. An event naming no version is taken as an older one."""
    none = "no refunds listed on the charge"
    if isinstance(api_version, str) and api_version[:10] >= REFUND_EVENTS_FOR_CHARGES:
        return f"{none}; its refund.* events carry them"
    charge = _charge_of(
        stored, {"charge": charge_obj.get("id"), "payment_intent": charge_obj.get("payment_intent")}
    )
    if charge is None:
        return f"{none}; not a charge Sill made"
    try:
        refunded = _minor(
            {"amount": charge_obj["amount_refunded"], "currency": charge_obj["currency"]}
        )
    except (KeyError, TypeError, ValueError):
        return f"{none}; malformed charge"
    if str(charge_obj["currency"]).upper() != charge.currency:
        return f"{none}; not the charge's currency"
    behind = unrecorded_refunded_minor(charge, refunded)
    if behind <= 0:
        return f"{none}; Sill's books already count what Stripe refunded"
    enqueue_on_commit(
        "refunds.catch_up_charge", charge.pk, stored.event_id, recovered_by="refunds.reconcile"
    )
    return (
        f"{none}; Stripe counts {behind} minor units refunded beyond Sill's books: the "
        "charge's refunds are read from Stripe"
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _minor(obj: dict[str, Any]) -> int:
    """The object's ``amount`` in minor units; ``ValueError`` unless Stripe's integer (a JSON
    ``true`` is an int to Python, and ``1.5`` would have been cut to 1) that a signed record
    holds (sill.money.recordable)."""
    value = obj["amount"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("amount is not an integer")
    minor = from_stripe_amount(value, obj["currency"])
    if abs(minor) > MAX_RECORDABLE_MINOR:
        raise ValueError("amount is larger than Sill can record")
    return minor


def _charge_of(stored: WebhookEvent, obj: dict[str, Any]) -> Charge | None:
    charges = Charge.objects.filter(rail=Rail.STRIPE, order__site_id=stored.site_id)
    if obj.get("charge"):
        found = charges.filter(provider_charge_id=str(obj["charge"])).first()
        if found is not None:
            return found
    if obj.get("payment_intent"):
        return charges.filter(provider_payment_id=str(obj["payment_intent"])).first()
    return None


def _apply_refund(stored: WebhookEvent, obj: dict[str, Any], event_at: datetime) -> str:
    refund_id = str(obj.get("id") or "")
    # Sill's own refund carries its id in the metadata, whatever state Sill's record of it
    # is in: never an outside refund. Its rail state goes to the refund core (a late failure
    # is reversed there).
    sill_refund_id = str(_mapping(obj.get("metadata")).get("sill_refund_id") or "")
    charge = _charge_of(stored, obj)
    if charge is None or not refund_id:
        if sill_refund_id:
            return f"{refund_id}: Sill's own refund"
        return f"{refund_id or 'refund'}: not a charge Sill made"
    try:
        report = RailRefund(
            provider_refund_id=refund_id,
            amount_minor=_minor(obj),
            currency=str(obj["currency"]).upper(),
            status=str(obj.get("status") or "succeeded"),
            created_at=_time(obj.get("created")),
            sill_refund_id=sill_refund_id,
            reason=str(obj.get("reason") or ""),
            failure_reason=str(obj.get("failure_reason") or ""),
        )
    except (KeyError, TypeError, ValueError):
        return f"{refund_id}: malformed refund"
    if not sill_refund_id and report.amount_minor <= 0:
        return f"{refund_id}: malformed refund"
    done = record_rail_refund(
        charge=charge, refund=report, event_id=stored.event_id, event_at=event_at
    )
    return f"{refund_id}: {done}"


def _apply_listed_refund(
    stored: WebhookEvent, obj: dict[str, Any], event_at: datetime, refused: list[ExceedsCharge]
) -> str:
    """One refund of a ``charge.refunded``'s list: one that does not fit the charge beside
    Sill's books is rolled back alone (its savepoint) and kept in ``refused``."""
    try:
        with transaction.atomic():
            return _apply_refund(stored, obj, event_at)
    except ExceedsCharge as exc:
        refused.append(exc)
        return f"{obj.get('id') or 'refund'}: not recorded, it would exceed the charge"


def _apply_dispute(stored: WebhookEvent, obj: dict[str, Any], event_at: datetime) -> str:
    dispute_id = str(obj.get("id") or "")
    charge = _charge_of(stored, obj)
    if charge is None or not dispute_id:
        return f"{dispute_id or 'dispute'}: not a charge Sill made"
    rail_status = str(obj.get("status") or "needs_response")
    # An amount Sill cannot read is recorded as not known: the dispute still refuses refunds.
    minor, currency = dispute_money(obj.get("amount"), obj.get("currency"))
    dispute = ReportedDispute(
        provider_dispute_id=dispute_id,
        reason=str(obj.get("reason") or "general"),
        amount_minor=minor,
        currency=currency,
        status=dispute_status(rail_status),
        rail_status=rail_status,
        opened_at=_time(obj.get("created")),
    )
    done = record_dispute(
        charge=charge, dispute=dispute, event_id=stored.event_id, event_at=event_at
    )
    return f"{dispute_id}: {done}"


def _time(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(int(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return timezone.now()
