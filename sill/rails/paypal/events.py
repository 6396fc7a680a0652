"""Processing of stored PayPal events (the ``rails.process_paypal_event`` task).

PayPal's signature covers the transmission id, its time, the webhook id and only a CRC32 of
the body, which a crafted body can keep: the body is never taken as fact. It names the
refund or dispute and the capture; Sill reads that resource again from PayPal's API with
the site's credentials (``PayPalRail.held_refund`` / ``held_dispute``, before the event's
row is locked: no transaction waits on PayPal) and records what PayPal holds as of that read,
as reconciliation does. PayPal holding no such resource (404), or holding it for another
capture than the body names, records nothing: the event is processed with an outcome
saying so. PayPal not answering (a timeout, 429, 5xx), or answering what Sill cannot read
(``PayPalUnreadable``), is a ``RetryableRailError``: the attempt is retried like any transient
failure (sill.rails.event_attempts).

Each event is applied once, under its row lock, as Stripe's are (sill.rails.stripe_events):

- ``PAYMENT.CAPTURE.REFUNDED`` and ``PAYMENT.CAPTURE.REVERSED`` (PayPal reversed the capture
  itself): the resource is a refund; its ``up`` link names the capture
  (Sill's charge). Sill's own refunds carry ``custom_id`` = Sill's refund id
  (sill.rails.paypal.rail): their state goes to the refund core (``report_own_refund``) and
  they are never outside refunds, whatever state Sill's record is in. Any other refund is an
  outside refund (``record_outside_refund``, which also recognises a refund Sill settled by
  its PayPal refund id).
- ``CUSTOMER.DISPUTE.CREATED`` / ``UPDATED`` / ``RESOLVED``: the resource is a dispute whose
  ``disputed_transactions[].seller_transaction_id`` is the capture; its status (and, once
  resolved, its outcome) is mapped by sill.rails.dispute_states and recorded on the charge.

Nothing here starts a money movement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from celery import shared_task
from django.db import OperationalError, transaction
from django.utils import timezone

from sill.orders.models import Charge, Rail
from sill.orders.outside import ReportedDispute, record_dispute, record_rail_refund
from sill.rails.base import SILL_REFUND_ID, RetryableRailError
from sill.rails.dispute_states import dispute_status
from sill.rails.event_attempts import attempt_event
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.paypal import reader_for
from sill.rails.paypal.rail import PayPalRail
from sill.rails.paypal.resources import (
    capture_of,
    dispute_money,
    dispute_reason,
    dispute_word,
    disputed_captures,
    rail_refund,
    time,
)
from sill.rails.registry import RailDisabled

# ``REVERSED``: PayPal itself took the capture's money back to the buyer (not the merchant); its
# resource is a refund of the capture, read and recorded as an outside refund like any other.
REFUND_EVENTS = frozenset({"PAYMENT.CAPTURE.REFUNDED", "PAYMENT.CAPTURE.REVERSED"})
DISPUTE_EVENTS = frozenset(
    {"CUSTOMER.DISPUTE.CREATED", "CUSTOMER.DISPUTE.UPDATED", "CUSTOMER.DISPUTE.RESOLVED"}
)


@dataclass(frozen=True)
class Held:
    """A refund or dispute of ``charge`` as PayPal's API holds it, as of ``event_at`` (when
    Sill's read of it started: :func:`_read_time`)."""

    kind: Literal["refund", "dispute"]
    charge: Charge
    resource: dict[str, Any]
    event_at: datetime


def process_event(event_pk: int) -> str:
    """Apply one stored event once; returns (and stores) what was done."""
    stored = WebhookEvent.objects.get(pk=event_pk)
    if stored.processed_at is not None:
        return stored.outcome
    # PayPal is read before the row is locked: no transaction stays open while it answers. Two
    # workers may both read; the lock lets one apply, and the other finds the event processed.
    held = _read_at_paypal(stored, json.loads(stored.payload), read_at=_read_time())
    with transaction.atomic():
        stored = WebhookEvent.objects.select_for_update().get(pk=event_pk)
        if stored.processed_at is not None:
            return stored.outcome
        outcome = held if isinstance(held, str) else _apply(stored, held)
        stored.processed_at = timezone.now()
        stored.outcome = outcome[:300]
        stored.save(update_fields=["processed_at", "outcome"])
    return outcome


@shared_task(
    name="rails.process_paypal_event",
    acks_late=True,
    autoretry_for=(OperationalError, RetryableRailError),
    retry_backoff=True,
    max_retries=5,
)
def process_paypal_event(event_pk: int) -> str:
    """A redelivered task finds its event processed and does nothing; a failed attempt is
    kept on the event and retried by ``rails.retry_webhook_events`` (sill.rails.event_attempts)."""
    return attempt_event(event_pk).outcome


def _read_time() -> datetime:
    """When a read of PayPal starts: what it returns is PayPal's state as of then, at least,
    and is recorded as of then, as reconciliation records its own read (sill.rails.charge_sync)
    and a Shopify webhook its order's. Not the resource's ``update_time``: that is PayPal's
    clock, and with Sill's a few seconds ahead, a refund PayPal failed right after
    reconciliation read it pending carried a time before that read, and its webhook was
    dropped as the older. Not cut to the second as reconciliation's is: two webhooks' reads
    within one second (a dispute OPEN, then waiting for the buyer) stay in their order."""
    return timezone.now()


def _read_at_paypal(
    stored: WebhookEvent, event: dict[str, Any], *, read_at: datetime
) -> Held | str:
    """What PayPal's API holds for the refund or dispute the event names (as of ``read_at``,
    when the read started), or (a str) why nothing is recorded. The body only says which
    resource to read and of which capture."""
    resource = event.get("resource")
    if not isinstance(resource, dict):
        return "ignored: the event has no resource"
    if stored.type in REFUND_EVENTS:
        return _read_refund(stored, resource, read_at)
    if stored.type in DISPUTE_EVENTS:
        return _read_dispute(stored, resource, read_at)
    return "ignored: not an event Sill records"


def _reader(stored: WebhookEvent) -> PayPalRail:
    account = RailAccount.objects.filter(site_id=stored.site_id, rail=Rail.PAYPAL).first()
    if account is None:
        raise RailDisabled("No PayPal account is connected to read this event's resource with.")
    return reader_for(account)


def _read_refund(stored: WebhookEvent, said: dict[str, Any], read_at: datetime) -> Held | str:
    refund_id = str(said.get("id") or "")
    capture_id = capture_of(said, held=False)
    charge = _charge(stored, capture_id)
    if charge is None or not refund_id:
        if SILL_REFUND_ID.fullmatch(str(said.get("custom_id") or "")):
            return f"{refund_id}: Sill's own refund"
        return f"{refund_id or 'refund'}: not a capture Sill knows"
    refund = _reader(stored).held_refund(refund_id)
    if refund is None:
        return f"{refund_id}: PayPal holds no such refund; nothing recorded"
    if capture_of(refund) != capture_id or str(refund.get("id") or "") != refund_id:
        return (
            f"{refund_id}: PayPal's refund is not of capture {capture_id}, as the event says; "
            "nothing recorded"
        )
    # Read before the lock: one Sill cannot read is PayPalUnreadable, and the event is retried.
    rail_refund(refund, default_time=read_at)
    return Held("refund", charge, refund, read_at)


def _read_dispute(stored: WebhookEvent, said: dict[str, Any], read_at: datetime) -> Held | str:
    dispute_id = str(said.get("dispute_id") or "")
    charge = next(
        (
            found
            for capture_id in disputed_captures(said, held=False)
            if (found := _charge(stored, capture_id)) is not None
        ),
        None,
    )
    if charge is None or not dispute_id:
        return f"{dispute_id or 'dispute'}: not a capture Sill knows"
    dispute = _reader(stored).held_dispute(dispute_id)
    if dispute is None:
        return f"{dispute_id}: PayPal holds no such dispute; nothing recorded"
    if (
        charge.provider_charge_id not in disputed_captures(dispute)
        or str(dispute.get("dispute_id") or "") != dispute_id
    ):
        return (
            f"{dispute_id}: PayPal's dispute is not of capture {charge.provider_charge_id}, "
            "as the event says; nothing recorded"
        )
    return Held("dispute", charge, dispute, read_at)


def _apply(stored: WebhookEvent, held: Held) -> str:
    if held.kind == "refund":
        return _apply_refund(stored, held.charge, held.resource, held.event_at)
    return _apply_dispute(stored, held.charge, held.resource, held.event_at)


def _charge(stored: WebhookEvent, capture_id: str) -> Charge | None:
    if not capture_id:
        return None
    return Charge.objects.filter(
        rail=Rail.PAYPAL, order__site_id=stored.site_id, provider_charge_id=capture_id
    ).first()


def _apply_refund(
    stored: WebhookEvent, charge: Charge, refund: dict[str, Any], event_at: datetime
) -> str:
    refund_id = str(refund["id"])
    report = rail_refund(refund, default_time=event_at)
    done = record_rail_refund(
        charge=charge, refund=report, event_id=stored.event_id, event_at=event_at
    )
    return f"{refund_id}: {done}"


def _apply_dispute(
    stored: WebhookEvent, charge: Charge, dispute: dict[str, Any], event_at: datetime
) -> str:
    dispute_id = str(dispute["dispute_id"])
    # An amount Sill cannot read is recorded as not known: the dispute still refuses refunds.
    minor, currency = dispute_money(dispute)
    rail_status = dispute_word(dispute)
    reported = ReportedDispute(
        provider_dispute_id=dispute_id,
        reason=dispute_reason(dispute),
        amount_minor=minor,
        currency=currency,
        status=dispute_status(rail_status),
        rail_status=rail_status,  # cut to what Sill keeps by record_dispute
        opened_at=time(dispute.get("create_time")) or event_at,
    )
    done = record_dispute(
        charge=charge, dispute=reported, event_id=stored.event_id, event_at=event_at
    )
    return f"{dispute_id}: {done}"
