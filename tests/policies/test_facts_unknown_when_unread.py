"""A rail read that fails or times out leaves its facts unknown, never a default.

The layer above the evaluator: ``read_refund_facts`` through ``decide_refund``, on Sill's
records and a real rail (the mock rail scripted to fail, a loopback Stripe that answers late
or not at all). Each fact of the snapshot decided without the rail's answer is the one decided
with it, or unknown: never a zero count, a ``False`` "not disputed", or any other value the
rail did not give. So, by the evaluator's property (test_engine_unknown_facts), no rule set
decides the unread refund more permissively than the read one; checked here too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as examples

from policies.engine import AutoRefund, compile_policy
from sill.orders.models import Charge, Customer, Order
from sill.rails.models import RailAccount
from tests.policies.test_engine_unknown_facts import AUTO, RULES, _decided, _valid
from tests.policies.test_facts import facts_for
from tests.rails import stripe_facts_stub
from tests.rails.loopback import keepalive_server

pytestmark = pytest.mark.django_db

# What the rail answers, and so what an unread rail must leave unknown.
RAIL_FACTS = (
    "refundChargeAgeDays",
    "refundCustomerAgeDays",
    "refundCustomerCount90d",
    "refundCustomerAmount90dUsd",
    "refundDisputed",
)
CUSTOMER_FACTS = RAIL_FACTS[1:4]


def assert_never_more_permissive(read: dict[str, Any], unread: dict[str, Any]) -> None:
    """Each fact is as read or unknown, and no rule set decides ``unread`` more permissively."""
    for name, value in unread.items():
        assert value is None or value == read[name], (name, value, read[name])

    @examples(max_examples=150, deadline=None, database=None)
    @given(RULES, AUTO)
    def decided(raw_rules: list[dict[str, Any]], auto: AutoRefund) -> None:
        policy = compile_policy(_valid(raw_rules))
        assert _decided(policy, auto, unread) >= _decided(policy, auto, read), raw_rules

    decided()


def with_customer(order: Order, rail_customer_id: str) -> Order:
    customer = Customer.objects.create(
        site=order.site,
        email="buyer@example.com",
        rail_customer_id=rail_customer_id,
        provider_created_at=timezone.now() - timedelta(days=400),
    )
    Order.objects.filter(pk=order.pk).update(customer=customer)
    order.refresh_from_db()
    return order


@pytest.mark.parametrize(
    ("script", "unknown"), [("fail", RAIL_FACTS), ("no_customers", CUSTOMER_FACTS)]
)
def test_a_mock_rail_that_cannot_answer_leaves_its_facts_unknown(
    script, unknown, make_order, agent, site, mock_rail
):
    order = with_customer(make_order(placed_by_agent=agent, days_ago=5), "cus_mock_1")
    earlier = make_order(placed_by_agent=agent, days_ago=10)
    Order.objects.filter(pk=earlier.pk).update(customer=order.customer)
    Charge.objects.filter(order=earlier).update(amount_refunded_minor=500)
    read = facts_for(order, "10.00")
    assert (read["refundCustomerCount90d"], read["refundDisputed"]) == (1, False)

    RailAccount.objects.filter(site=site, rail="mock").update(config={"facts": script})
    unread = facts_for(order, "10.00")
    assert [name for name in RAIL_FACTS if unread[name] is None] == list(unknown)
    assert_never_more_permissive(read, unread)


@pytest.mark.parametrize(
    "late",
    [
        ("charge",),
        ("customer",),
        ("customer history",),
        ("charge", "customer", "customer history"),
    ],
)
def test_a_stripe_read_that_times_out_leaves_its_facts_unknown(
    late, make_order, agent, site, settings
):
    settings.SILL_RAIL_FACT_TIMEOUT_SECONDS = 0.5
    order = make_order(rail="stripe", placed_by_agent=agent, days_ago=3)
    order = with_customer(order, "cus_facts")  # Stripe is asked for all three at once
    account = RailAccount(site=site, rail="stripe", enabled=True)
    account.set_secret(stripe_facts_stub.KEY)
    stub = stripe_facts_stub.StripeFactsStub()
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        account.api_base = server.url
        account.save()
        read = facts_for(order, "10.00")
        stub.slow = dict.fromkeys(late, 2.0)
        unread = facts_for(order, "10.00")
    assert read["refundDisputed"] is False and read["refundCustomerCount90d"] == 0
    expected = {
        "charge": ("refundChargeAgeDays", "refundDisputed"),
        "customer": ("refundCustomerAgeDays",),
        "customer history": ("refundCustomerCount90d", "refundCustomerAmount90dUsd"),
    }
    assert {name for name in RAIL_FACTS if unread[name] is None} == {
        name for read_name in late for name in expected[read_name]
    }
    assert_never_more_permissive(read, unread)


def test_a_stripe_that_cannot_be_reached_leaves_every_rail_fact_unknown(make_order, agent, site):
    order = with_customer(make_order(rail="stripe", placed_by_agent=agent), "cus_facts")
    account = RailAccount(site=site, rail="stripe", enabled=True, api_base="http://127.0.0.1:9")
    account.set_secret(stripe_facts_stub.KEY)
    account.save()
    unread = facts_for(order, "10.00")
    assert all(unread[name] is None for name in RAIL_FACTS)
    stub = stripe_facts_stub.StripeFactsStub()
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        RailAccount.objects.filter(pk=account.pk).update(api_base=server.url)
        read = facts_for(order, "10.00")
    assert_never_more_permissive(read, unread)
