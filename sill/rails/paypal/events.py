"""Processing of stored PayPal events (the ``rails.process_paypal_event`` task).

Each event is applied once, under its row lock, as Stripe's are (sill.rails.stripe_events):

- ``PAYMENT.CAPTURE.REFUNDED``: the resource is a refund; its ``up`` link names the capture
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
from datetime import datetime
from typing import Any

from celery import shared_task
from django.db import OperationalError, transaction
from django.utils import timezone

from sill.orders.models import Charge, Rail
from sill.orders.outside import (
    OutsideRefund,
    ReportedDispute,
    record_dispute,
    record_outside_refund,
    report_own_refund,
)
from sill.rails.dispute_states import dispute_status
from sill.rails.event_attempts import attempt_event
from sill.rails.models import WebhookEvent
from sill.rails.paypal.resources import (
    SILL_REFUND_ID,
    amount,
    capture_of,
    dispute_word,
    rail_refund,
    time,
)

REFUND_EVENTS = frozenset({"PAYMENT.CAPTURE.REFUNDED"})
DISPUTE_EVENTS = frozenset(
    {"CUSTOMER.DISPUTE.CREATED", "CUSTOMER.DISPUTE.UPDATED", "CUSTOMER.DISPUTE.RESOLVED"}
)


def process_event(event_pk: int) -> str:
    """Apply one stored event once; returns (and stores) what was done."""
    with transaction.atomic():
        stored = WebhookEvent.objects.select_for_update().get(pk=event_pk)
        if stored.processed_at is not None:
            return stored.outcome
        outcome = _apply(stored, json.loads(stored.payload))
        stored.processed_at = timezone.now()
        stored.outcome = outcome[:300]
        stored.save(update_fields=["processed_at", "outcome"])
    return outcome


@shared_task(
    name="rails.process_paypal_event",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def process_paypal_event(event_pk: int) -> str:
    """A redelivered task finds its event processed and does nothing; a failed attempt is
    kept on the event and retried by ``rails.retry_webhook_events`` (sill.rails.event_attempts)."""
    return attempt_event(event_pk).outcome


def _apply(stored: WebhookEvent, event: dict[str, Any]) -> str:
    resource = event.get("resource")
    if not isinstance(resource, dict):
        return "ignored: the event has no resource"
    if stored.type in REFUND_EVENTS:
        return _apply_refund(stored, resource, _event_time(event, resource))
    if stored.type in DISPUTE_EVENTS:
        return _apply_dispute(stored, resource, _event_time(event, resource))
    return "ignored: not an event Sill records"


def _charge(stored: WebhookEvent, capture_id: str) -> Charge | None:
    if not capture_id:
        return None
    return Charge.objects.filter(
        rail=Rail.PAYPAL, order__site_id=stored.site_id, provider_charge_id=capture_id
    ).first()


def _apply_refund(stored: WebhookEvent, refund: dict[str, Any], event_at: datetime) -> str:
    refund_id = str(refund.get("id") or "")
    custom_id = str(refund.get("custom_id") or "")
    charge = _charge(stored, capture_of(refund))
    if charge is None or not refund_id:
        if SILL_REFUND_ID.match(custom_id):
            return f"{refund_id}: Sill's own refund"
        return f"{refund_id or 'refund'}: not a capture Sill knows"
    report = rail_refund(refund, default_time=event_at)
    if report is None:
        return f"{refund_id}: malformed refund"
    if report.sill_refund_id:
        done = report_own_refund(charge=charge, refund=report, event_id=stored.event_id)
        return f"{refund_id}: {done}"
    outside = OutsideRefund(
        provider_refund_id=refund_id,
        amount_minor=report.amount_minor,
        currency=report.currency,
        status=report.status,
        created_at_rail=report.created_at,
        reason=report.reason,
    )
    done = record_outside_refund(
        charge=charge, refund=outside, event_id=stored.event_id, event_at=event_at
    )
    return f"{refund_id}: {done}"


def _apply_dispute(stored: WebhookEvent, dispute: dict[str, Any], event_at: datetime) -> str:
    dispute_id = str(dispute.get("dispute_id") or "")
    transactions = [t for t in dispute.get("disputed_transactions") or [] if isinstance(t, dict)]
    charge = next(
        (
            found
            for t in transactions
            if (found := _charge(stored, str(t.get("seller_transaction_id") or ""))) is not None
        ),
        None,
    )
    if charge is None or not dispute_id:
        return f"{dispute_id or 'dispute'}: not a capture Sill knows"
    money = amount(dispute.get("dispute_amount"))
    if money is None:
        return f"{dispute_id}: malformed dispute"
    rail_status = dispute_word(dispute)
    reported = ReportedDispute(
        provider_dispute_id=dispute_id,
        reason=str(dispute.get("reason") or "general"),
        amount_minor=money[0],
        currency=money[1],
        status=dispute_status(rail_status),
        rail_status=rail_status[:100],
        opened_at=time(dispute.get("create_time")) or event_at,
    )
    done = record_dispute(
        charge=charge, dispute=reported, event_id=stored.event_id, event_at=event_at
    )
    return f"{dispute_id}: {done}"


def _event_time(event: dict[str, Any], resource: dict[str, Any]) -> datetime:
    # The resource's update time orders the events of one refund or dispute; the event's own
    # time is a fallback.
    return time(resource.get("update_time")) or time(event.get("create_time")) or timezone.now()
