"""A refund decision's fact reads: independent reads at once, each bounded by a short timeout.

Concurrency is seen by the stub (two requests in flight at the same moment), not timed. A
read that outlasts ``SILL_RAIL_FACT_TIMEOUT_SECONDS`` leaves its facts unknown, and an unknown
fact takes a rule's restrictive branch: the refund is held, never approved.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from audit.models import AuditRecord
from policies import catalog
from policies.services import apply_catalog_item
from sill.rails.base import RefundFactsRequest
from sill.rails.models import RailAccount
from sill.rails.paypal.client import TOKENS, PayPalClient
from sill.rails.paypal.rail import PayPalRail
from sill.rails.shopify.client import ShopifyClient
from sill.rails.shopify.rail import ShopifyRail
from sill.rails.stripe import StripeRail
from tests.rails import paypal_stub, shopify_stub, stripe_facts_stub
from tests.rails.loopback import Overlap, keepalive_server, overlapping
from tests.refunds.conftest import post, refund_intent

# Stubs answer this late; the rails under test wait 0.5 s.
SLOW = 2.0


def facts_request(charge_id: str, customer_id: str = "") -> RefundFactsRequest:
    return RefundFactsRequest(
        provider_charge_id=charge_id,
        currency="USD",
        history_since=datetime.now(UTC) - timedelta(days=90),
        provider_customer_id=customer_id,
    )


def test_stripe_reads_the_charge_the_customer_and_the_history_at_once():
    stub, overlap = stripe_facts_stub.StripeFactsStub(), Overlap()
    handler = overlapping(stripe_facts_stub.Handler, overlap)
    with keepalive_server(handler, stub=stub) as server:
        rail = StripeRail(secret_key=stripe_facts_stub.KEY, api_base=server.url)
        facts = rail.read_refund_facts(facts_request("ch_1", "cus_facts"))
    assert sorted(stub.seen) == ["charge", "customer", "customer history"]
    assert overlap.most >= 2
    assert facts.charge_created_at is not None and facts.customer_created_at is not None


def test_stripe_reads_the_customer_and_the_history_at_once_after_the_charge_names_it():
    stub, overlap = stripe_facts_stub.StripeFactsStub(), Overlap()
    with keepalive_server(overlapping(stripe_facts_stub.Handler, overlap), stub=stub) as server:
        rail = StripeRail(secret_key=stripe_facts_stub.KEY, api_base=server.url)
        facts = rail.read_refund_facts(facts_request("ch_1"))  # no customer id: the charge's
    assert stub.seen[0] == "charge" and sorted(stub.seen[1:]) == ["customer", "customer history"]
    assert overlap.most >= 2
    assert facts.history is not None


def test_shopify_reads_the_order_and_the_customer_at_once():
    stub, overlap = shopify_stub.ShopifyStub(), Overlap()
    with keepalive_server(overlapping(shopify_stub._Handler, overlap), stub=stub) as server:
        stub.url = server.url
        cid = stub.add_customer()
        placed = stub.add_order(customer_id=cid)
        client = ShopifyClient(
            shop_domain=shopify_stub.SHOP, token=shopify_stub.TOKEN, api_base=server.url
        )
        facts = ShopifyRail(client=client).read_refund_facts(
            facts_request(placed.transactions[0]["id"], f"gid://shopify/Customer/{cid}")
        )
    assert sorted(op for op, _ in stub.calls) == ["SillChargeFacts", "SillCustomerFacts"]
    assert overlap.most >= 2
    assert facts.charge_created_at is not None and facts.customer_created_at is not None


def test_a_slow_stripe_charge_read_leaves_only_its_facts_unknown():
    stub = stripe_facts_stub.StripeFactsStub(slow={"charge": SLOW})
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        rail = StripeRail(secret_key=stripe_facts_stub.KEY, api_base=server.url, fact_timeout=0.5)
        facts = rail.read_refund_facts(facts_request("ch_1", "cus_facts"))
    assert facts.charge_created_at is None and facts.charge_refunded_minor is None
    assert facts.charge_disputed is None
    assert facts.customer_created_at is not None and facts.history is not None


def test_a_slow_shopify_order_read_leaves_its_facts_unknown():
    stub = shopify_stub.ShopifyStub()
    with keepalive_server(SlowShopify, stub=stub) as server:
        stub.url = server.url
        placed = stub.add_order()
        client = ShopifyClient(
            shop_domain=shopify_stub.SHOP, token=shopify_stub.TOKEN, api_base=server.url
        )
        facts = ShopifyRail(client=client, fact_timeout=0.5).read_refund_facts(
            facts_request(placed.transactions[0]["id"])
        )
    assert facts.charge_created_at is None and facts.live_money is None


class SlowShopify(shopify_stub._Handler):
    def do_POST(self) -> None:
        time.sleep(SLOW)
        super().do_POST()


class SlowPayPalReads(paypal_stub._Handler):
    def do_GET(self) -> None:
        time.sleep(SLOW)
        super().do_GET()


def test_a_slow_paypal_capture_read_leaves_its_facts_unknown():
    TOKENS.clear()
    stub = paypal_stub.PayPalStub()
    with keepalive_server(SlowPayPalReads, stub=stub) as server:
        stub.url = server.url
        capture = stub.add_capture()
        client = PayPalClient(
            client_id=paypal_stub.CLIENT_ID,
            client_secret=paypal_stub.CLIENT_SECRET,
            api_base=server.url,
            timeout=20,
        )
        facts = PayPalRail(client=client, fact_timeout=0.5).read_refund_facts(
            facts_request(capture.id)
        )
    TOKENS.clear()
    assert facts.charge_created_at is None and facts.charge_refunded_minor is None
    assert facts.live_money is False  # a sandbox account says so without asking


ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"


@pytest.fixture
def stripe_site(site):
    """Connects ``site``'s Stripe rail to a facts stub's address."""

    def connect(stub: stripe_facts_stub.StripeFactsStub, url: str) -> None:
        account = RailAccount(site=site, rail="stripe", api_base=url, enabled=True)
        account.set_secret(stripe_facts_stub.KEY)
        account.save()

    return connect


@pytest.mark.django_db
@pytest.mark.parametrize(("slow", "decision"), [({}, "approved"), ({"charge": SLOW}, "escalated")])
def test_a_charge_read_slower_than_the_timeout_holds_the_refund(
    slow, decision, stripe_site, make_order, agent, sign, members, site, settings
):
    settings.SILL_RAIL_FACT_TIMEOUT_SECONDS = 0.5
    item = catalog.item_by_id("old-charge")
    assert item is not None
    apply_catalog_item(site=site, actor=members["owner"].user, item=item)
    stub = stripe_facts_stub.StripeFactsStub(slow=slow)
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        stripe_site(stub, server.url)
        make_order(rail="stripe", placed_by_agent=agent, source_mandate_id=ORIGINAL)
        response = post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00"))))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["decision"] == decision
    facts = _decision_facts(body["refund_id"])
    if slow:
        # Unknown age: the old-charge rule's restrictive branch holds it for a human.
        assert body["status"] == "held"
        assert facts["refundChargeAgeDays"] is None
    else:
        assert facts["refundChargeAgeDays"] == 3


def _decision_facts(refund_id: str) -> dict:
    for record in AuditRecord.objects.order_by("seq"):
        payload = json.loads(record.payload)["body"]
        if payload.get("refund_id") == refund_id and "facts" in payload:
            return payload["facts"]
    raise AssertionError(f"no decision record for {refund_id}")
