"""Shopify refund facts: the order, the live-money check, the customer and its 90 days."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from sill.rails.base import RefundFactsRequest
from sill.rails.registry import rail_for
from sill.rails.shopify import rail as shopify_rail

pytestmark = pytest.mark.django_db


def _request(placed, cid=None, *, limit: int = 100) -> RefundFactsRequest:
    return RefundFactsRequest(
        provider_charge_id=placed.transactions[0]["id"],
        currency="USD",
        history_since=datetime.now(UTC) - timedelta(days=90),
        provider_customer_id=f"gid://shopify/Customer/{cid}" if cid else "",
        history_limit=limit,
    )


def test_it_maps_the_order_and_customer_facts(site, shopify, shopify_account):
    cid = shopify.add_customer(days_ago=400)
    shopify.add_order(customer_id=cid, total="20.00", refunded="5.00", days_ago=10)
    shopify.add_order(customer_id=cid, total="30.00", refunded="30.00", days_ago=20)
    shopify.add_order(customer_id=cid, total="50.00", refunded="10.00", days_ago=120)  # too old
    placed = shopify.add_order(customer_id=cid, total="89.00", days_ago=3)
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(_request(placed, cid))
    assert facts.live_money is False
    assert abs(facts.charge_created_at - placed.created_at) < timedelta(seconds=1)
    assert (facts.charge_refunded_minor, facts.charge_disputed) == (0, False)
    assert (datetime.now(UTC) - facts.customer_created_at).days == 400
    assert facts.history is not None
    assert (facts.history.refunded_charges, facts.history.refunded_minor) == (2, 3500)
    assert facts.history.truncated is False


def test_a_full_page_of_history_is_truncated(site, shopify, shopify_account):
    cid = shopify.add_customer()
    for _ in range(3):
        shopify.add_order(customer_id=cid, refunded="1.00")
    placed = shopify.add_order(customer_id=cid)
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(
        _request(placed, cid, limit=2)
    )
    assert facts.history is not None and facts.history.truncated is True


def test_disputes_and_the_live_store_show_in_the_facts(site, shopify, shopify_account):
    placed = shopify.add_order()
    placed.disputes.append(
        {
            "id": "gid://shopify/ShopifyPaymentsDispute/1",
            "status": "NEEDS_RESPONSE",
            "initiatedAs": "CHARGEBACK",
        }
    )
    shopify.plan = {"partnerDevelopment": False, "publicDisplayName": "Grow"}
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(_request(placed))
    assert (facts.charge_disputed, facts.live_money) == (True, True)
    assert facts.customer_created_at is None and facts.history is None  # a guest


def test_disputes_shopify_does_not_list_are_unknown_not_none(site, shopify, shopify_account):
    """An order whose ``disputes`` Shopify answers as null (not an empty list: the field
    withheld, as GraphQL does for a field the app may not read) says nothing about disputes.
    Seen: it read as "not disputed", the permissive value, and a rule holding disputed
    charges let the refund through."""
    placed = shopify.add_order()
    placed.disputes = None  # type: ignore[assignment]
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(_request(placed))
    assert facts.charge_disputed is None
    assert facts.charge_created_at is not None  # the rest of the order was read


def test_without_read_customers_customer_facts_are_unknown_and_logged_once(
    site, shopify, shopify_account, caplog
):
    shopify_rail._logged_no_customers.clear()
    shopify.scopes = ["read_orders", "write_orders"]
    cid = shopify.add_customer()
    placed = shopify.add_order(customer_id=cid)
    rail = rail_for(site_id=site.pk, rail="shopify")
    with caplog.at_level(logging.WARNING):
        first = rail.read_refund_facts(_request(placed, cid))
        rail.read_refund_facts(_request(placed, cid))
    assert first.customer_created_at is None and first.history is None
    assert first.charge_created_at is not None and first.live_money is False
    assert sum("lacks read_customers" in r.getMessage() for r in caplog.records) == 1


def test_an_unreachable_store_gives_unknown_facts(site, shopify, shopify_account):
    placed = shopify.add_order()
    shopify_account.api_base = "http://127.0.0.1:9"
    shopify_account.save()
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(_request(placed))
    assert (facts.charge_created_at, facts.live_money, facts.charge_disputed) == (None, None, None)
