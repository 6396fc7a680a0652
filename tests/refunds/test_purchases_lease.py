"""A charge's lease is fenced: when it lapses the sweep re-claims the charge, and the worker
that held it can no longer record anything."""

from __future__ import annotations

import io
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from audit.models import AuditRecord
from sill.orders.charge_lease import claim_charge, release_charge
from sill.orders.charging import charge_order
from sill.orders.models import Charge
from sill.orders.tasks import recover_stuck_charges
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def pending_charge(make_order, agent, mock_rail, settings):
    """An agent's order as place_order leaves it; its charge task is run by each test."""
    settings.SILL_CHARGE_LEASE_SECONDS = 1
    settings.SILL_RECOVER_AFTER_SECONDS = 0
    # The stalled worker: the rail records the charge, then takes 4 s to answer.
    mock_rail.config = {"delay_seconds": 4}
    mock_rail.save()
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_lease"
    )
    return Charge.objects.create(
        order=order,
        rail="mock",
        amount_minor=order.total_minor,
        currency=order.currency,
        payment_method="pm_card_visa",
    )


def start_stalled_worker(charge: Charge) -> tuple[threading.Thread, dict[str, object]]:
    """Run one attempt in a thread; return once the rail has made the charge and the
    attempt's lease has lapsed (the rail is still "answering")."""
    seen: dict[str, object] = {}

    def work() -> None:
        try:
            seen["outcome"] = charge_order(order_id=charge.order_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    wait_for(lambda: MockLedgerEntry.objects.filter(kind="charge").exists())
    seen["token"] = Charge.objects.get(pk=charge.pk).lease_token
    wait_for(lambda: Charge.objects.get(pk=charge.pk).lease_until < timezone.now())
    return thread, seen


def prompt_rail(account) -> None:
    account.config = {}
    account.save()


def test_a_lapsed_lease_is_reclaimed_by_the_sweep_and_the_stale_holder_cannot_record(
    pending_charge, mock_rail
):
    charge = pending_charge
    thread, stale = start_stalled_worker(charge)
    try:
        prompt_rail(mock_rail)  # the next worker gets a prompt answer
        assert recover_stuck_charges() == 1

        settled = Charge.objects.get(pk=charge.pk)
        assert settled.status == "succeeded" and settled.lease_token != stale["token"]
        assert not release_charge(charge.pk, str(stale["token"]))
    finally:
        thread.join(timeout=30)

    assert stale["outcome"] == "lease-lost"
    order = settled.order
    settled.refresh_from_db()
    entry = MockLedgerEntry.objects.get(kind="charge")
    assert order.status == "PAID"
    assert (settled.status, settled.provider_payment_id) == ("succeeded", entry.provider_id)
    assert settled.attempts == 2
    # One charge record, from the holder of the current token; the stale holder found the
    # charge it saw already recorded, so it had nothing to add.
    assert list(AuditRecord.objects.filter(site=order.site).values_list("kind", flat=True)) == [
        "charge"
    ]
    call_command("audit", "verify", stdout=io.StringIO())


def test_a_success_the_stale_holder_saw_is_recorded_and_settled_by_the_lookup(
    pending_charge, mock_rail
):
    charge = pending_charge
    thread, stale = start_stalled_worker(charge)
    prompt_rail(mock_rail)
    # Another worker claims the charge and stalls in its turn (it never gets further).
    other = claim_charge(charge.pk)
    assert other is not None
    thread.join(timeout=30)

    assert stale["outcome"] == "lease-lost"
    assert Charge.objects.get(pk=charge.pk).status == "pending"  # not recorded by the stale
    # Once that lease lapses too, the sweep's attempt looks the charge up and settles it.
    wait_for(lambda: Charge.objects.get(pk=charge.pk).lease_until < timezone.now())
    assert recover_stuck_charges() == 1

    settled = Charge.objects.get(pk=charge.pk)
    entry = MockLedgerEntry.objects.get(kind="charge")
    assert (settled.status, settled.provider_payment_id) == ("succeeded", entry.provider_id)
    assert settled.order.status == "PAID"
    records = AuditRecord.objects.filter(site=settled.order.site).order_by("seq")
    assert [r.kind for r in records] == ["lease_lost", "charge"]
    assert entry.provider_id in records[0].payload
    call_command("audit", "verify", stdout=io.StringIO())
