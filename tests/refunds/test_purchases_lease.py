"""A charge's lease is fenced: when it lapses the sweep re-claims the charge, and the worker
that held it can no longer record anything. A worker waiting on a slow rail renews it."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditRecord
from sill.orders.charge_lease import claim_charge, release_charge
from sill.orders.charging import charge_order
from sill.orders.models import Charge
from sill.orders.tasks import recover_stuck_charges
from sill.rails.models import MockLedgerEntry
from tests.rails.stripe_account_proxy import AccountProxy, StubServer
from tests.rails.stripe_events import stripe_account

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def pending_charge(make_order, agent, mock_rail, settings):
    """An agent's order as place_order leaves it; its charge task is run by each test."""
    settings.SILL_RECOVER_AFTER_SECONDS = 0
    # The rail records the charge, then takes 3 s to answer.
    mock_rail.config = {"delay_seconds": 3}
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


def start_worker(charge: Charge) -> tuple[threading.Thread, dict[str, object]]:
    """Run one attempt in a thread; return once the rail has made the charge (the rail is
    still "answering"), with the attempt's token."""
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
    return thread, seen


def lapse(charge: Charge) -> None:
    Charge.objects.filter(pk=charge.pk).update(lease_until=timezone.now() - timedelta(seconds=1))


def start_stalled_worker(charge: Charge) -> tuple[threading.Thread, dict[str, object]]:
    """``start_worker``, then its lease lapses: the worker stalled past it (a paused process
    renews nothing; the default lease is far longer than the call, so no renewal is due)."""
    thread, seen = start_worker(charge)
    lapse(charge)
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
    lapse(charge)
    assert recover_stuck_charges() == 1

    settled = Charge.objects.get(pk=charge.pk)
    entry = MockLedgerEntry.objects.get(kind="charge")
    assert (settled.status, settled.provider_payment_id) == ("succeeded", entry.provider_id)
    assert settled.order.status == "PAID"
    records = AuditRecord.objects.filter(site=settled.order.site).order_by("seq")
    assert [r.kind for r in records] == ["lease_lost", "charge"]
    assert entry.provider_id in records[0].payload
    call_command("audit", "verify", stdout=io.StringIO())


def test_a_rail_call_longer_than_the_lease_renews_it(pending_charge, settings):
    charge = pending_charge
    settings.SILL_CHARGE_LEASE_SECONDS = 1  # the 3 s rail call outlasts it: renewed twice a second
    thread, seen = start_worker(charge)
    try:
        time.sleep(1.6)  # past the lease the claim took
        assert Charge.objects.get(pk=charge.pk).lease_until > timezone.now()
        assert claim_charge(charge.pk) is None  # the renewed lease keeps another attempt out
        assert recover_stuck_charges() == 0
    finally:
        thread.join(timeout=30)

    assert seen["outcome"] == "succeeded"
    settled = Charge.objects.get(pk=charge.pk)
    assert (settled.status, settled.attempts, settled.lease_until) == ("succeeded", 1, None)
    assert MockLedgerEntry.objects.filter(kind="charge").count() == 1
    kinds = AuditRecord.objects.filter(site=settled.order.site).values_list("kind", flat=True)
    assert list(kinds) == ["charge"]


def renewal_backend() -> int:
    """The PostgreSQL backend of the lease's renewing thread: the newest connection to this
    database but this test's own (the worker's opened before its claim, the renewer's as the
    rail call started)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            " ORDER BY backend_start DESC LIMIT 1"
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres
def test_a_renewal_whose_connection_is_killed_reconnects_and_keeps_the_lease(
    pending_charge, mock_rail, settings, caplog
):
    # A database failover or a killed backend under the renewing thread: the renewal after it
    # fails, the next one reconnects, and the lease outlives the call as before. (The thread
    # used to die at the first error, leaving the lease to lapse under the call.)
    charge = pending_charge
    mock_rail.config = {"delay_seconds": 4}
    mock_rail.save()
    settings.SILL_CHARGE_LEASE_SECONDS = 1.5  # renewed every 0.5 s
    thread, seen = start_worker(charge)
    try:
        time.sleep(0.7)  # the first renewal opened the renewer's connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [renewal_backend()])
        time.sleep(2.2)  # past the lease the last renewal before the kill gave
        assert Charge.objects.get(pk=charge.pk).lease_until > timezone.now()
        assert claim_charge(charge.pk) is None
        assert recover_stuck_charges() == 0
    finally:
        thread.join(timeout=30)

    assert seen["outcome"] == "succeeded"
    settled = Charge.objects.get(pk=charge.pk)
    assert (settled.status, settled.attempts) == ("succeeded", 1)
    assert MockLedgerEntry.objects.filter(kind="charge").count() == 1
    assert "renewing the lease failed" in caplog.text


def test_a_renewing_worker_whose_lease_was_taken_over_neither_takes_it_back_nor_settles(
    pending_charge, settings
):
    charge = pending_charge
    settings.SILL_CHARGE_LEASE_SECONDS = 1
    thread, stale = start_worker(charge)
    # Taken over between two renewals (the worker stalled a moment): the lapse and the claim
    # commit together, so no renewal slips in between.
    with transaction.atomic():
        lapse(charge)
        current = claim_charge(charge.pk)
    assert current is not None
    time.sleep(1.2)  # renewals due meanwhile: each is refused
    assert Charge.objects.get(pk=charge.pk).lease_token == current
    thread.join(timeout=30)

    assert stale["outcome"] == "lease-lost"
    held = Charge.objects.get(pk=charge.pk)
    assert (held.status, held.lease_token) == ("pending", current)
    entry = MockLedgerEntry.objects.get(kind="charge")
    (lost,) = AuditRecord.objects.filter(site=held.order.site)
    assert lost.kind == "lease_lost" and entry.provider_id in lost.payload


def test_a_slow_lookup_renews_the_lease_too(site, make_order, agent, localstripe_url, settings):
    """Stripe without search is asked by listing up to ten pages, each call up to its timeout:
    an attempt looking up what an earlier one charged keeps its lease while it waits."""
    settings.SILL_CHARGE_LEASE_SECONDS = 1
    answer = threading.Event()
    with StubServer(AccountProxy(localstripe=localstripe_url, hold_lookups=answer)) as stripe:
        stripe_account(site, enabled=True, api_base=stripe.url)
        order = make_order(
            rail="stripe",
            charged=False,
            status="PENDING",
            placed_by_agent=agent,
            source_mandate_id="mnd_lookup",
        )
        charge = Charge.objects.create(
            order=order,
            rail="stripe",
            amount_minor=order.total_minor,
            currency=order.currency,
            payment_method="pm_card_visa",
            rail_attempted_at=timezone.now(),  # an earlier attempt may have reached Stripe
        )
        seen: dict[str, str] = {}

        def work() -> None:
            try:
                seen["outcome"] = charge_order(order_id=order.pk)
            finally:
                connection.close()

        thread = threading.Thread(target=work)
        thread.start()
        try:
            wait_for(lambda: stripe.lookups_held > 0)
            time.sleep(1.6)  # past the lease the claim took
            assert claim_charge(charge.pk) is None
        finally:
            answer.set()
            thread.join(timeout=30)

    assert seen["outcome"] == "succeeded"  # nothing found, then charged under the same key
    settled = Charge.objects.get(pk=charge.pk)
    assert (settled.status, settled.attempts) == ("succeeded", 1)
    assert stripe.charge_idempotency_keys == [f"sill-charge-{order.pk}"]
