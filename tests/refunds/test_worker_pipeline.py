"""The agent pipeline with a real Celery worker process: mock rail, Stripe (localstripe), recovery."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from refunds.models import Refund
from refunds.tasks import recover_stuck_refunds_task
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry, RailAccount
from sill.rails.stripe import StripeRail
from tests.refunds.conftest import post, purchase_intent, refund_intent
from tests.worker import lease_lapsed, recovered, running_worker, wait_for, worker_killed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def _order_status(order_id: str) -> str:
    return Order.objects.get(pk=order_id).status


def _buy_and_refund(
    client: Client, sign, *, rail: str, payment_method: str
) -> tuple[Order, Refund]:
    bought = post(
        client, sign(purchase_intent(payment={"rail": rail, "payment_method": payment_method}))
    )
    assert bought.status_code == 201, bought.json()
    order_id = bought.json()["order_id"]
    wait_for(lambda: _order_status(order_id) == "PAID", timeout=60, what="the charge")
    asked = post(client, sign(refund_intent(bought.json()["mandate_id"])))
    assert asked.status_code == 201, asked.json()
    assert asked.json()["decision"] == "approved"
    refund_id = asked.json()["refund_id"]
    wait_for(
        lambda: Refund.objects.get(pk=refund_id).status == "succeeded",
        timeout=60,
        what="the refund",
    )
    return Order.objects.get(pk=order_id), Refund.objects.get(pk=refund_id)


def test_it_buys_and_refunds_on_the_mock_rail_in_a_real_worker(tmp_path, sign, mock_rail):
    with running_worker(tmp_path / "worker.log"):
        order, refund = _buy_and_refund(Client(), sign, rail="mock", payment_method="pm_card_visa")
    assert order.status == "REFUNDED"
    assert refund.amount_minor == 8900 and refund.provider_refund_id.startswith("mock_re_")
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_it_buys_and_refunds_on_stripe_against_localstripe(tmp_path, sign, site, localstripe_url):
    account = RailAccount(site=site, rail="stripe", api_base=localstripe_url)
    account.set_secret("sk_test_sill_localstripe_0001")
    account.save()
    with running_worker(tmp_path / "worker.log"):
        order, refund = _buy_and_refund(
            Client(), sign, rail="stripe", payment_method="pm_card_visa"
        )
    assert order.status == "REFUNDED"
    charge = Charge.objects.get(order=order)
    assert charge.provider_charge_id.startswith("ch_") and refund.provider_refund_id.startswith(
        "re_"
    )
    stripe = StripeRail(secret_key="sk_test_sill_localstripe_0001", api_base=localstripe_url)
    assert stripe.charge_amount_refunded(charge.provider_charge_id).amount_minor == 8900
    assert charge.amount_refunded_minor == 8900


def test_a_worker_killed_after_the_rail_call_settles_once_after_restart(
    tmp_path, sign, make_order, agent, mock_rail
):
    """The rail made the refund, the worker died before settling: recovery finds it (same key)."""
    order = make_order(placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN")
    mock_rail.config = {"delay_seconds": 30}  # the rail answers slowly, after recording
    mock_rail.save()
    refunded = MockLedgerEntry.objects.filter(kind="refund").exists
    with worker_killed(tmp_path / "first.log", failpoint=None, rail_acted=refunded):
        body = post(
            Client(),
            sign(refund_intent("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN", max_amount=Decimal("50.00"))),
        ).json()
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "processing"  # money moved, Sill not yet told

    mock_rail.config = {}
    mock_rail.save()
    recovered(
        tmp_path / "second.log",
        lapsed=lambda: lease_lapsed(Refund.objects.filter(pk=refund.pk)),
        sweep=recover_stuck_refunds_task,
        done=lambda: Refund.objects.get(pk=refund.pk).status == "succeeded",
    )
    entries = MockLedgerEntry.objects.filter(kind="refund")
    assert entries.count() == 1
    refund.refresh_from_db()
    assert refund.provider_refund_id == entries.get().provider_id
    assert refund.attempts >= 2
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (5000, 0)
