"""Execution leases with fencing: the token of the claim is needed to change the refund."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction
from django.utils import timezone

from audit.models import AuditRecord
from refunds.execution import claim, execute_refund, release, renew
from refunds.models import Refund
from refunds.services import LeaseLost, fail_refund, new_refund, reserve, settle_refund
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry


@pytest.fixture
def processing_refund(site, members, mock_rail, make_order):
    """An approved, reserved refund whose execution was not enqueued (the tests run it)."""
    order = make_order(total="40.00")
    charge = Charge.objects.get(order=order)
    with transaction.atomic():
        refund = new_refund(
            site=site, order=order, charge=charge, origin="staff",
            requested_by=members["staff"].user, amount_minor=4000, currency="USD", rail="mock",
            decision="approved", status="processing",
        )  # fmt: skip
        reserve(refund=refund, charge=charge)
    return refund


def _lapse(refund_id: str) -> None:
    Refund.objects.filter(pk=refund_id).update(lease_until=timezone.now() - timezone.timedelta(1))


@pytest.mark.django_db
def test_it_gives_the_lease_to_one_claimant_at_a_time(processing_refund):
    first = claim(processing_refund.id)
    assert first is not None
    assert claim(processing_refund.id) is None
    assert release(processing_refund.id, first)
    second = claim(processing_refund.id)
    assert second is not None and second != first


@pytest.mark.django_db
def test_a_worker_whose_lease_was_taken_over_can_no_longer_change_the_refund(processing_refund):
    stale = claim(processing_refund.id)
    _lapse(processing_refund.id)
    current = claim(processing_refund.id)
    assert current is not None
    with pytest.raises(LeaseLost):
        settle_refund(refund_id=processing_refund.id, provider_refund_id="re_x", token=stale)
    with pytest.raises(LeaseLost):
        fail_refund(refund_id=processing_refund.id, code="x", message="x", token=stale)
    assert not release(processing_refund.id, stale)
    assert not renew(processing_refund.id, stale)
    refund = Refund.objects.get(pk=processing_refund.id)
    assert refund.status == "processing" and refund.lease_token == current
    assert Charge.objects.get(pk=refund.charge_id).amount_reserved_minor == 4000


@pytest.mark.django_db(transaction=True)
def test_a_success_seen_after_losing_the_lease_is_recorded_and_settled_by_the_lookup(
    processing_refund, mock_rail
):
    """Worker A stalls past its lease during the rail call; B takes over; A's success is
    recorded (lease_lost) rather than dropped, and B settles it once through the lookup."""
    from refunds import execution

    seen: dict[str, str] = {}

    def take_over_during_the_call() -> None:
        # Runs while A's rail call is in progress: the lease lapses and B claims it.
        from django.db import connection

        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if MockLedgerEntry.objects.filter(kind="refund").exists():
                    _lapse(processing_refund.id)
                    seen["b"] = claim(processing_refund.id) or ""
                    return
                time.sleep(0.05)
        finally:
            connection.close()

    mock_rail.config = {"delay_seconds": 1}
    mock_rail.save()
    helper = threading.Thread(target=take_over_during_the_call)
    # The default lease is long: A's renewals won't run during a one-second call.
    helper.start()
    outcome = execution.execute_refund(processing_refund.id)
    helper.join()
    assert seen["b"]
    assert outcome == "lease-lost"
    lost = AuditRecord.objects.get(kind="lease_lost")
    assert MockLedgerEntry.objects.get(kind="refund").provider_id in lost.payload
    refund = Refund.objects.get(pk=processing_refund.id)
    assert refund.status == "processing"

    # B (simulated by the next execution after B's lease lapses) looks up first and settles.
    _lapse(processing_refund.id)
    mock_rail.config = {}
    mock_rail.save()
    assert execute_refund(processing_refund.id) == "succeeded"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    charge = Charge.objects.get(pk=refund.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (4000, 0)


@pytest.mark.django_db(transaction=True)
def test_a_long_rail_call_renews_its_lease(processing_refund, mock_rail, settings):
    settings.SILL_EXECUTION_LEASE_SECONDS = 1
    mock_rail.config = {"delay_seconds": 2.5}
    mock_rail.save()
    claims: list[str | None] = []

    def try_to_claim_during_the_call() -> None:
        from django.db import connection

        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if MockLedgerEntry.objects.filter(kind="refund").exists():
                    time.sleep(1.6)  # past the original one-second lease
                    claims.append(claim(processing_refund.id))
                    return
                time.sleep(0.05)
        finally:
            connection.close()

    other = threading.Thread(target=try_to_claim_during_the_call)
    other.start()
    assert execute_refund(processing_refund.id) == "succeeded"
    other.join()
    assert claims == [None]  # the renewed lease kept the other claimant out
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
