"""The charge fault matrix: a real worker SIGKILLed at each step of a purchase's charge.

The worker dies after committing that the rail may be called and before calling it, while it
waits on a rail that has charged the buyer, right after the rail answered, and inside the
transaction that records the charge. After each, a second worker, sent by the beat sweep,
recovers the charge: the buyer is charged exactly once at the rail, under the idempotency key
``sill-charge-<order id>``, the order is paid, one signed ``charge`` record says so, and
``audit verify`` passes. On the mock rail, whose ledger is the provider's own record, and on
localstripe through the real Stripe SDK. The kill points are failpoints (``sill.failpoints``)
armed only in the first worker's environment; the shared steps are in tests/worker.py.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from threading import Event
from typing import Any

import pytest
import stripe
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from sill.orders.models import Charge, Order
from sill.orders.tasks import recover_stuck_charges_task
from sill.rails.models import MockLedgerEntry
from tests.rails.localstripe_fixtures import KEY
from tests.rails.stripe_account_proxy import AccountProxy, StubServer
from tests.rails.stripe_events import stripe_account
from tests.refunds.conftest import post, purchase_intent
from tests.worker import lease_lapsed, recovered, worker_killed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

KILL_POINTS = pytest.mark.parametrize(
    "failpoint",
    [
        "before_charge_call=kill",
        None,  # killed while the rail, having charged the buyer, has not answered yet
        "after_charge_call=kill",
        "in_charge_settlement=kill",
    ],
    ids=["before-the-rail-call", "during-the-rail-call", "after-the-rail-call", "in-settlement"],
)


def buy_with_a_worker_killed(
    tmp_path, sign, *, failpoint, rail: str, rail_acted
) -> tuple[Order, bytes]:
    """POST a purchase on ``rail``; the worker charging it is killed (``worker_killed``).
    Returns the order and the mandate sent, for the resend at the end."""
    body = sign(purchase_intent(payment={"rail": rail, "payment_method": "pm_card_visa"}))
    with worker_killed(tmp_path / "first.log", failpoint=failpoint, rail_acted=rail_acted):
        answer = post(Client(), body)
        assert answer.status_code == 201, answer.json()
        assert answer.json()["status"] == "processing"
    return Order.objects.get(pk=answer.json()["order_id"]), body


def assert_killed_before_recording(order: Order) -> None:
    """Sill was not told: the charge is pending, the rail may hold it, no charge is recorded."""
    charge = Charge.objects.get(order=order)
    order.refresh_from_db()
    assert (order.status, charge.status) == ("PENDING", "pending")
    assert charge.rail_attempted_at is not None  # committed before the rail call
    assert not AuditRecord.objects.filter(site=order.site, kind="charge").exists()


def recover(tmp_path, order: Order) -> Charge:
    recovered(
        tmp_path / "second.log",
        lapsed=lambda: lease_lapsed(Charge.objects.filter(order=order)),
        sweep=recover_stuck_charges_task,
        done=lambda: Charge.objects.get(order=order).status != "pending",
    )
    return Charge.objects.get(order=order)


def assert_paid_once(order: Order, charge: Charge, *, provider_payment_id: str) -> None:
    """Paid, by the rail's one payment, with one signed ``charge`` record naming it."""
    order.refresh_from_db()
    assert (order.status, charge.status) == ("PAID", "succeeded")
    assert charge.provider_payment_id == provider_payment_id
    assert charge.attempts >= 2 and charge.lease_until is None
    records = AuditRecord.objects.filter(site=order.site).order_by("seq")
    # The decision, signed with the order before the first worker ran, then the one charge.
    assert [r.kind for r in records] == ["approved", "charge"]
    body = json.loads(records[1].payload)["body"]
    assert (body["outcome"], body["provider_payment_id"]) == ("succeeded", provider_payment_id)
    assert body["decision_hash"] == records[0].hash
    call_command("audit", "verify", stdout=io.StringIO())


def assert_resend_charges_nothing(body: bytes) -> None:
    answer = post(Client(), body)
    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "succeeded"


# --- the mock rail: its ledger is the provider's record -------------------------------------


@KILL_POINTS
def test_a_worker_killed_at_any_step_of_a_charge_charges_the_buyer_once_on_the_mock_rail(
    tmp_path, sign, mock_rail, failpoint
):
    if failpoint is None:
        mock_rail.config = {"delay_seconds": 30}  # records the charge, then answers slowly
        mock_rail.save()
    charged = MockLedgerEntry.objects.filter(kind="charge").exists
    order, body = buy_with_a_worker_killed(
        tmp_path, sign, failpoint=failpoint, rail="mock", rail_acted=charged
    )
    assert_killed_before_recording(order)
    assert charged() is (failpoint != "before_charge_call=kill")

    mock_rail.config = {}
    mock_rail.save()
    charge = recover(tmp_path, order)

    entry = MockLedgerEntry.objects.get(kind="charge")  # exactly one charge at the rail
    assert (entry.idempotency_key, entry.amount_minor) == (f"sill-charge-{order.pk}", 8900)
    assert charge.provider_charge_id == entry.provider_charge_id
    assert_paid_once(order, charge, provider_payment_id=entry.provider_id)
    assert_resend_charges_nothing(body)
    assert MockLedgerEntry.objects.filter(kind="charge").count() == 1


# --- Stripe: localstripe behind a proxy that sees every payment posted ---------------------


@pytest.fixture
def stripe_rail(site, localstripe_url: str) -> Iterator[AccountProxy]:
    """The site's Stripe rail, its key pointed at localstripe through ``AccountProxy``."""
    with StubServer(AccountProxy(localstripe=localstripe_url)) as proxy:
        stripe_account(site, enabled=True, api_base=proxy.url)
        yield proxy


def intents_for(order: Order, localstripe_url: str) -> list[Any]:
    """Every PaymentIntent at localstripe made for ``order`` (localstripe has no search)."""
    sdk = stripe.StripeClient(KEY, base_addresses={"api": localstripe_url}, max_network_retries=0)
    listed = sdk.v1.payment_intents.list(params={"limit": 100})
    return [
        i
        for i in listed.data
        if i.metadata and i.metadata.to_dict().get("sill_order_id") == order.pk
    ]


@KILL_POINTS
def test_a_worker_killed_at_any_step_of_a_charge_charges_the_buyer_once_on_stripe(
    tmp_path, sign, stripe_rail, localstripe_url, failpoint
):
    held = Event()
    if failpoint is None:
        stripe_rail.hold_charge_answers = held  # localstripe charges; the answer is held back
    try:
        order, body = buy_with_a_worker_killed(
            tmp_path,
            sign,
            failpoint=failpoint,
            rail="stripe",
            rail_acted=lambda: stripe_rail.charges_held > 0,
        )
    finally:
        held.set()
    stripe_rail.hold_charge_answers = None
    assert_killed_before_recording(order)
    assert len(intents_for(order, localstripe_url)) == (failpoint != "before_charge_call=kill")

    charge = recover(tmp_path, order)

    # localstripe ignores idempotency keys: a second payment posted would be a second charge,
    # so the recovery must have found the first by its lookup, never posted again.
    (intent,) = intents_for(order, localstripe_url)
    assert (intent.status, intent.amount) == ("succeeded", 8900)
    assert stripe_rail.charge_idempotency_keys == [f"sill-charge-{order.pk}"]
    assert charge.provider_charge_id == intent.latest_charge.id  # localstripe expands it
    assert_paid_once(order, charge, provider_payment_id=intent.id)
    assert_resend_charges_nothing(body)
    assert len(intents_for(order, localstripe_url)) == 1
