"""Rails keep their connections alive: one kept-alive session per rail and credentials.

A rail object is built for every call, as the registry does for every refund attempt and fact
read; each stub below is served over HTTP/1.1 and counts the TCP connections it accepts. A
client that opened a connection per call (PayPal's own ``requests.Session`` per client,
ShopifyAPI's ``urllib``, WooCommerce's ``requests.request``) would show one per call.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sill.rails.base import RefundFactsRequest
from sill.rails.paypal.client import TOKENS, PayPalClient
from sill.rails.paypal.rail import PayPalRail
from sill.rails.shopify.client import ShopifyClient
from sill.rails.shopify.rail import ShopifyRail
from sill.rails.stripe import StripeRail
from sill.rails.woocommerce.client import WooClient
from tests.rails import paypal_stub, shopify_stub, stripe_facts_stub, woo_stub
from tests.rails.loopback import keepalive_server

CALLS = 5


def facts_request(charge_id: str, customer_id: str = "") -> RefundFactsRequest:
    return RefundFactsRequest(
        provider_charge_id=charge_id,
        currency="USD",
        history_since=datetime.now(UTC) - timedelta(days=90),
        provider_customer_id=customer_id,
    )


def test_paypal_reuses_one_connection_across_clients_and_calls():
    TOKENS.clear()
    stub = paypal_stub.PayPalStub()
    with keepalive_server(paypal_stub._Handler, stub=stub) as server:
        stub.url = server.url
        capture = stub.add_capture()
        for _ in range(CALLS):
            client = PayPalClient(
                client_id=paypal_stub.CLIENT_ID,
                client_secret=paypal_stub.CLIENT_SECRET,
                api_base=server.url,
                timeout=5,
            )
            facts = PayPalRail(client=client).read_refund_facts(facts_request(capture.id))
            assert facts.charge_created_at is not None and facts.charge_refunded_minor == 0
    TOKENS.clear()
    # A token, then a capture and its order per call: 1 + 2 x CALLS requests, one connection.
    assert stub.token_requests == 1
    assert server.connections == 1


def test_shopify_reuses_its_connections_across_clients_and_calls():
    stub = shopify_stub.ShopifyStub()
    with keepalive_server(shopify_stub._Handler, stub=stub) as server:
        stub.url = server.url
        cid = stub.add_customer()
        placed = stub.add_order(customer_id=cid)
        request = facts_request(placed.transactions[0]["id"], f"gid://shopify/Customer/{cid}")
        for _ in range(CALLS):
            client = ShopifyClient(
                shop_domain=shopify_stub.SHOP, token=shopify_stub.TOKEN, api_base=server.url
            )
            facts = ShopifyRail(client=client).read_refund_facts(request)
            assert facts.charge_created_at is not None and facts.customer_created_at is not None
    # Two reads per call, made at once: at most two connections, kept for every call.
    assert len(stub.calls) == 2 * CALLS
    assert server.connections <= 2


def test_woocommerce_reuses_one_connection_across_clients_and_calls():
    stub = woo_stub.WooStub()
    with keepalive_server(woo_stub._Handler, stub=stub) as server:
        stub.url = server.url
        order = stub.add_order()
        for _ in range(CALLS):
            client = WooClient(
                store_url=server.url,
                consumer_key=woo_stub.CONSUMER_KEY,
                consumer_secret=woo_stub.CONSUMER_SECRET,
                timeout=5,
            )
            assert client.refunds(order.id) == []
    assert stub.auth_seen == ["oauth1"] * CALLS  # still the library's own signing
    assert server.connections == 1


def test_stripe_reuses_its_connections_across_rails_and_calls():
    stub = stripe_facts_stub.StripeFactsStub()
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        for _ in range(CALLS):
            rail = StripeRail(secret_key=stripe_facts_stub.KEY, api_base=server.url)
            facts = rail.read_refund_facts(facts_request("ch_1", "cus_facts"))
            assert facts.history is not None and facts.customer_created_at is not None
    # Three reads per call, made at once: at most three connections, kept for every call.
    assert len(stub.seen) == 3 * CALLS
    assert server.connections <= 3


def test_two_sets_of_credentials_never_share_a_session():
    from sill.rails import keepalive

    one = keepalive.session_for("paypal", "https://api", "client", "secret-one")
    assert keepalive.session_for("paypal", "https://api", "client", "secret-one") is one
    assert keepalive.session_for("paypal", "https://api", "client", "secret-two") is not one
    assert keepalive.session_for("woocommerce", "https://api", "client", "secret-one") is not one
