"""Facts computed at decision time from Sill's records and the rail, on Sill's clock."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from policies.decide import decide_refund
from policies.types import RefundContext
from refunds.models import Refund
from sill.accounts.models import Agent
from sill.money import Money, parse_major
from sill.orders.models import Charge, ChargeStatus, Customer, Dispute, Order
from sill.rails.models import RailAccount

pytestmark = pytest.mark.django_db


@pytest.fixture
def customer(site) -> Customer:
    return Customer.objects.create(
        site=site,
        email="buyer@example.com",
        rail_customer_id="cus_mock_1",
        provider_created_at=timezone.now() - timedelta(days=400),
    )


@pytest.fixture
def buy(make_order, agent, mock_rail):
    def make(*, customer: Customer | None = None, days_ago: int = 1, **kwargs: Any) -> Order:
        kwargs.setdefault("placed_by_agent", agent)
        order = make_order(days_ago=days_ago, **kwargs)
        if customer is not None:
            Order.objects.filter(pk=order.pk).update(customer=customer)
            order.refresh_from_db()
        return order

    return make


def facts_for(
    order: Order,
    amount: str,
    *,
    agent: Agent | None = None,
    origin: str = "agent",
    reason: str | None = "wrong_item",
    now=None,
) -> dict[str, Any]:
    charge = Charge.objects.get(order=order)
    context = RefundContext(
        site=order.site,
        order=order,
        charge=charge,
        amount=parse_major(amount, order.currency),
        origin=origin,
        agent=agent if agent is not None else order.placed_by_agent,
        user=None,
        reason=reason,
        now=now or timezone.now(),
    )
    return decide_refund(context).facts


def refunded(order: Order, minor: int) -> None:
    Charge.objects.filter(order=order).update(amount_refunded_minor=minor)


def test_it_records_every_fact_of_a_customer_order(buy, customer, agent):
    order = buy(customer=customer, days_ago=10)
    refunded(order, 900)  # an earlier 9.00 refund of this very charge
    older = buy(customer=customer, days_ago=20)
    refunded(older, 500)
    twice = buy(customer=customer, days_ago=30)
    refunded(twice, 1200)  # refunded in two parts: still one charge
    buy(customer=customer, days_ago=40)  # never refunded: not counted
    euro = buy(customer=customer, days_ago=5, currency="EUR")
    refunded(euro, 700)  # another currency: not counted
    ancient = buy(customer=customer, days_ago=95)
    refunded(ancient, 800)  # older than 90 days: not counted
    Refund.objects.create(
        site=order.site, order=older, charge=Charge.objects.get(order=older), origin="agent",
        agent=agent, amount_minor=500, currency="USD", decision="approved", status="succeeded",
    )  # fmt: skip

    facts = facts_for(order, "40.00")

    assert facts == {
        "factsVersion": 1,
        "refundAmount": 4000,
        "refundAmountUsd": 4000,
        "refundFraction": {"num": 4900, "den": 8900},
        "refundChargeAgeDays": 10,
        "refundWindowDaysLeft": None,  # no window on a mock charge with no merchant window
        "refundCustomerAgeDays": 400,
        "refundCustomerCount90d": 3,
        "refundCustomerAmount90dUsd": 2600,
        "refundCustomerRefunds30d": 1,
        "refundAgentTotalTodayUsd": 4500,
        "refundDisputed": False,
        "refundReason": "wrong_item",
        "refundOrigin": "agent",
        "agentPlacedOriginal": True,
        "rail": "mock",
        "currency": "USD",
    }


def no_floats(value: Any) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return all(no_floats(v) for v in value.values())
    return all(no_floats(v) for v in value) if isinstance(value, list) else True


def test_the_snapshot_is_json_with_no_floats(buy, customer):
    facts = facts_for(buy(customer=customer), "33.33")
    assert no_floats(facts)
    assert json.loads(json.dumps(facts)) == facts


def test_a_guest_has_no_customer_facts(buy):
    facts = facts_for(buy(), "10.00")
    for name in (
        "refundCustomerAgeDays",
        "refundCustomerCount90d",
        "refundCustomerAmount90dUsd",
        "refundCustomerRefunds30d",
    ):
        assert facts[name] is None, name
    assert facts["refundChargeAgeDays"] == 1


def test_it_rounds_the_usd_amount_up_and_knows_no_rate_as_unknown(buy):
    yen = buy(total="10001", currency="JPY")
    # 10001 JPY x 0.0067 = 67.0067 USD → 6700.67 cents → 6701 (rounded up).
    assert facts_for(yen, "10001")["refundAmountUsd"] == 6701
    pesos = buy(total="100.00", currency="ARS")
    facts = facts_for(pesos, "100.00")
    assert facts["refundAmountUsd"] is None
    assert facts["refundAgentTotalTodayUsd"] is None
    assert facts["refundAmount"] == 10000 and facts["currency"] == "ARS"


def test_a_truncated_history_is_a_lower_bound(buy, customer):
    order = buy(customer=customer)
    extra = Order.objects.get(pk=buy(customer=customer).pk)
    Charge.objects.bulk_create(
        Charge(
            order=extra, rail="mock", amount_minor=100, amount_refunded_minor=100,
            currency="USD", status=ChargeStatus.SUCCEEDED, captured_at=timezone.now(),
            provider_charge_id=f"ch_bulk_{i}",
        )
        for i in range(100)
    )  # fmt: skip
    facts = facts_for(order, "10.00")
    # One page of 100 was read (the newest: the bulk charges), and more exist.
    assert facts["refundCustomerCount90d"] == {"value": 100, "truncated": True}
    assert facts["refundCustomerAmount90dUsd"] == {"value": 10000, "truncated": True}


def test_an_open_dispute_in_sill_marks_the_charge_disputed(buy):
    order = buy()
    charge = Charge.objects.get(order=order)
    Dispute.objects.create(
        charge=charge, reason="fraudulent", amount_minor=8900, currency="USD",
        status="won", opened_at=timezone.now(),
    )  # fmt: skip
    assert facts_for(order, "10.00")["refundDisputed"] is False  # a closed dispute
    Dispute.objects.create(
        charge=charge, reason="fraudulent", amount_minor=8900, currency="USD",
        status="needs_response", opened_at=timezone.now(),
    )  # fmt: skip
    assert facts_for(order, "10.00")["refundDisputed"] is True


def test_a_failed_rail_read_leaves_the_rail_facts_unknown(buy, customer, site):
    order = buy(customer=customer)
    RailAccount.objects.filter(site=site, rail="mock").update(config={"facts": "fail"})
    facts = facts_for(order, "10.00")
    for name in (
        "refundChargeAgeDays",
        "refundCustomerAgeDays",
        "refundCustomerCount90d",
        "refundCustomerAmount90dUsd",
        "refundDisputed",
    ):
        assert facts[name] is None, name
    # What Sill knows itself stays known.
    assert facts["refundAmountUsd"] == 1000 and facts["refundCustomerRefunds30d"] == 0


def test_a_key_that_cannot_read_customers_leaves_only_customer_facts_unknown(buy, customer, site):
    order = buy(customer=customer, days_ago=3)
    RailAccount.objects.filter(site=site, rail="mock").update(config={"facts": "no_customers"})
    facts = facts_for(order, "10.00")
    assert facts["refundCustomerAgeDays"] is None and facts["refundCustomerCount90d"] is None
    assert facts["refundChargeAgeDays"] == 3 and facts["refundDisputed"] is False


def test_a_rail_sill_cannot_ask_gives_unknown_facts(buy):
    order = buy(rail="paypal")  # no PayPal account on this site: nothing to ask
    facts = facts_for(order, "10.00")
    assert facts["refundChargeAgeDays"] is None and facts["refundDisputed"] is None
    assert facts["rail"] == "paypal"


def test_ages_use_sills_clock(buy, customer):
    order = buy(customer=customer, days_ago=1)
    later = timezone.now() + timedelta(days=60, hours=1)
    facts = facts_for(order, "10.00", now=later)
    assert facts["refundChargeAgeDays"] == 61
    assert facts["refundCustomerAgeDays"] == 460


def test_a_staff_refund(buy):
    order = buy(placed_by_agent=None)
    facts = facts_for(order, "10.00", origin="staff", agent=None, reason=None)
    assert facts["refundOrigin"] == "staff" and facts["agentPlacedOriginal"] is False
    assert facts["refundReason"] == "none" and facts["refundAgentTotalTodayUsd"] is None


def test_the_agents_total_today_counts_its_live_refunds_in_every_currency(buy, agent, site):
    other = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other", refund_enabled=True
    )
    order = buy()
    for amount, currency, status, who in [
        (1000, "USD", "succeeded", agent),
        (2000, "EUR", "held", agent),  # 2000 EUR cents x 1.08 = 2160 US cents
        (5000, "USD", "rejected", agent),  # refused: moved nothing
        (7000, "USD", "succeeded", other),  # another agent
    ]:
        earlier = buy()  # one live agent refund per order
        Refund.objects.create(
            site=site, order=earlier, charge=Charge.objects.get(order=earlier), origin="agent",
            agent=who, amount_minor=amount, currency=currency, decision="approved",
            status=status,
        )  # fmt: skip
    assert facts_for(order, "10.00")["refundAgentTotalTodayUsd"] == 1000 + 2160 + 1000


def test_the_fraction_counts_refunds_in_flight(buy):
    order = buy()
    Charge.objects.filter(order=order).update(amount_reserved_minor=4450)
    assert facts_for(order, "44.50")["refundFraction"] == {"num": 8900, "den": 8900}


def test_money_never_depends_on_the_caller(buy):
    # The context's amount is Sill's quote; the snapshot stores it in minor units.
    facts = facts_for(buy(), "0.01")
    assert facts["refundAmount"] == 1 and facts["refundAmountUsd"] == 1
    assert Money(facts["refundAmount"], facts["currency"]) == Money(1, "USD")
