"""Every query Sill sends Shopify costs at most 1,000 points by Shopify's documented rules.

Shopify refuses a query whose requested cost passes 1,000 points (``MAX_COST_EXCEEDED``) before
it runs. The order sync's query read 50 orders with 100 line items, 50 transactions and 50
refunds (of 10 transactions) each: 60,403 points, and one order alone 1,208, so on a real store
no sync, order webhook or reconciliation of a Shopify order could have run. The cost is
computed from the query text and variables the loopback store received
(tests/rails/shopify_cost.py).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from sill.rails.shopify import queries
from sill.rails.shopify.rail import LISTS_MAX, ORDERS_PAGE, REFUND_TRANSACTIONS_PAGE
from sill.rails.shopify.sync import sync_orders
from tests.rails.shopify_cost import MAX_COST, requested_cost
from tests.rails.test_shopify_refunds import _execute, _refund

pytestmark = pytest.mark.django_db


def test_the_documented_rules_give_shopifys_own_figures():
    # shopify.dev's worked example, and a forum's: 2 + 10 x (1 + 2 + 5 x 1); 1 + 2 + 250 x 2.
    assert (
        requested_cost(
            "query { products(first: 10) { edges { node { title "
            "variants(first: 5) { edges { node { price } } } } } } }"
        )
        == 82
    )
    assert (
        requested_cost(
            "query V($id: ID!) { product(id: $id) { variants(first: 250) { nodes { "
            "inventoryItem { id tracked } } } } }"
        )
        == 503
    )


def test_every_query_the_sync_refunds_and_facts_send_costs_at_most_1000_points(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    cid = shopify.add_customer()
    for i in range(ORDERS_PAGE + 1):
        shopify.add_order(total=f"{20 + i}.00", customer_id=cid)
    long = shopify.add_order(total="300.00")
    long.lines = [(f"SKU-{i}", f"Item {i}", 1, Decimal("1.00")) for i in range(300)]
    for _ in range(LISTS_MAX["refunds"] + 5):
        shopify._make_refund(long, Decimal("0.10"), note="Refunded in the Shopify admin")
    sync_orders(site=site)
    from sill.orders.models import Order

    order = Order.objects.filter(site=site).exclude(charges__provider_payment_id=str(long.id))[0]
    refund = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded"
    sent = {op for op, _q, _v in shopify.requests}
    assert {"SillOrders", "SillOrderLines", "SillRefunds", "SillChargeFacts"} <= sent
    assert {"SillCustomerFacts", "SillRefundPlan", "SillRefundCreate"} <= sent
    costs = {op: 0 for op in sent}
    for op, query, variables in shopify.requests:
        costs[op] = max(costs[op], requested_cost(query, variables))
    assert max(costs.values()) <= MAX_COST, costs
    # 2 + 8 orders x 108 + pageInfo: pinned, see sill.rails.shopify.rail
    assert costs["SillOrders"] == 867


def test_the_lists_read_alone_fit_at_their_largest():
    sizes = {
        queries.ORDER_LINES: {"lines": 250},
        queries.ORDER_TRANSACTIONS: {"transactions": LISTS_MAX["transactions"]},
        queries.REFUNDS: {"refunds": LISTS_MAX["refunds"]},
        queries.REFUND_TRANSACTIONS_AFTER: {"transactions": REFUND_TRANSACTIONS_PAGE},
    }
    for query, variables in sizes.items():
        assert requested_cost(query, variables) <= MAX_COST, query
