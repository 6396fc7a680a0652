"""Executing an approved refund on its rail: once, with one idempotency key, recoverable.

A refund in ``processing`` has its amount reserved on the charge. Execution claims a lease
with a conditional UPDATE (so two workers never call the rail for one refund at the same
time), then:

* on a retry (``attempts > 1``) first asks the rail whether the refund already happened —
  an earlier attempt may have reached the rail and died before settling;
* otherwise calls ``rail.refund`` with ``sill-refund-<refund id>``, the same key every time.

Permanent errors fail the refund and release the reservation. Retryable and ambiguous
errors leave it ``processing`` and raise so the task retries; ``recover_stuck_refunds``
(beat, every minute) re-enqueues any processing refund whose lease has lapsed, which covers
a worker killed between the rail call and settlement.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from refunds.models import Refund, RefundStatus
from refunds.services import fail_refund, settle_refund
from sill.orders.selectors import has_open_dispute
from sill.rails.base import RailError, RefundRequest, RefundResult
from sill.rails.registry import RailDisabled, rail_for


class RefundPending(Exception):
    """The rail accepted the refund but has not finished it: check again later."""


def lease_seconds() -> int:
    return int(getattr(settings, "SILL_EXECUTION_LEASE_SECONDS", 120))


def claim(refund_id: str) -> bool:
    now = timezone.now()
    claimed = (
        Refund.objects.filter(pk=refund_id, status=RefundStatus.PROCESSING)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(
            lease_until=now + timedelta(seconds=lease_seconds()),
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )
    return claimed == 1


def release(refund_id: str) -> None:
    Refund.objects.filter(pk=refund_id, status=RefundStatus.PROCESSING).update(lease_until=None)


def refund_request(refund: Refund) -> RefundRequest:
    charge = refund.charge
    assert charge is not None
    return RefundRequest(
        refund_id=refund.id,
        idempotency_key=refund.idempotency_key,
        amount=refund.amount,
        provider_charge_id=charge.provider_charge_id,
        provider_payment_id=charge.provider_payment_id,
        metadata={"sill_refund_id": refund.id, "sill_order_id": refund.order_id or ""},
    )


def execute_refund(refund_id: str) -> str:
    """Run one execution attempt. Returns the outcome; raises RailError to ask for a retry."""
    if not claim(refund_id):
        return "not-claimed"
    refund = Refund.objects.select_related("charge", "site").get(pk=refund_id)
    request = refund_request(refund)
    try:
        rail = rail_for(site_id=refund.site_id, rail=refund.rail)
        result: RefundResult | None = None
        if refund.attempts > 1:
            result = rail.find_refund(request)
        if result is None and has_open_dispute(refund.charge):
            # A dispute opened after the decision: the bank is already moving this money.
            fail_refund(
                refund_id=refund.id,
                code="disputed",
                message="a dispute was opened on the charge after the refund was approved",
            )
            return "failed"
        if result is None:
            result = rail.refund(request)
    except RailDisabled as exc:
        fail_refund(refund_id=refund.id, code="rail_disabled", message=exc.message)
        return "failed"
    except RailError as exc:
        if exc.retryable:
            release(refund.id)
            raise
        fail_refund(refund_id=refund.id, code=exc.code, message=exc.message)
        return "failed"
    if result.state == "failed":
        fail_refund(refund_id=refund.id, code="rail_declined", message=result.failure_message)
        return "failed"
    if result.state == "pending":
        release(refund.id)
        raise RefundPending(result.provider_refund_id)
    settle_refund(refund_id=refund.id, provider_refund_id=result.provider_refund_id)
    return "succeeded"


def stuck_refund_ids(*, older_than: timedelta) -> list[str]:
    """Processing refunds no execution holds, untouched for ``older_than``."""
    now = timezone.now()
    return list(
        Refund.objects.filter(status=RefundStatus.PROCESSING, updated_at__lt=now - older_than)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .values_list("id", flat=True)[:500]
    )
