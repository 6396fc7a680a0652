"""POST /webhooks/shopify/<site_id>: verified by HMAC, stored once, processed by the task."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import Client

from sill.accounts import two_factor
from sill.orders.models import Charge, Dispute, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from tests.rails.shopify_fixtures import signed_headers

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _on_commit(django_capture_on_commit_callbacks):
    """Run the processing task (eager) when the stored event commits, as in production."""
    global _capture
    _capture = django_capture_on_commit_callbacks


def _post(site, body: bytes, **headers):
    with _capture(execute=True):
        return Client().post(
            f"/webhooks/shopify/{site.pk}", body, content_type="application/json", **headers
        )


def _order_body(placed) -> bytes:
    # The REST shape Shopify sends; Sill reads only the id and asks the API for the rest.
    return json.dumps(
        {"id": placed.id, "admin_graphql_api_id": placed.gid, "name": placed.name, "test": True}
    ).encode()


def test_a_signed_orders_create_brings_the_order_in(site, shopify, shopify_account):
    placed = shopify.add_order()
    body = _order_body(placed)
    response = _post(site, body, **signed_headers(body, topic="orders/create", webhook_id="wh-1"))
    assert response.status_code == 200 and response.json() == {"received": True, "duplicate": False}
    event = WebhookEvent.objects.get(rail="shopify")
    assert event.processed_at is not None and event.outcome.startswith("created")
    assert Charge.objects.get().provider_payment_id == str(placed.id)


def test_a_bad_signature_is_400_and_stores_nothing(site, shopify, shopify_account):
    body = _order_body(shopify.add_order())
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-1", secret="wrong")
    response = _post(site, body, **headers)
    assert response.status_code == 400 and response.json()["error"]["code"] == "webhook_refused"
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-1")
    assert _post(site, body + b" ", **headers).status_code == 400  # the body changed
    del headers["HTTP_X_SHOPIFY_HMAC_SHA256"]
    assert _post(site, body, **headers).status_code == 400
    assert not WebhookEvent.objects.exists() and not Order.objects.exists()


def test_a_duplicate_webhook_id_is_applied_once(site, shopify, shopify_account):
    placed = shopify.add_order()
    body = _order_body(placed)
    headers = signed_headers(body, topic="orders/updated", webhook_id="wh-dup")
    assert _post(site, body, **headers).json()["duplicate"] is False
    second = _post(site, body, **headers)
    assert second.status_code == 200 and second.json()["duplicate"] is True
    assert WebhookEvent.objects.count() == 1 and Order.objects.count() == 1
    assert [op for op, _ in shopify.calls].count("SillOrder") == 1


def test_a_signed_body_that_is_not_json_is_400(site, shopify, shopify_account):
    for body in (b"{not json", b"[1, 2]", b'{"id": 1, "id": 2}'):
        headers = signed_headers(body, topic="orders/create", webhook_id="wh-bad")
        assert _post(site, body, **headers).status_code == 400
    assert not WebhookEvent.objects.exists()


def test_another_store_or_site_is_refused(site, other_site, shopify, shopify_account):
    body = _order_body(shopify.add_order())
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-x")
    assert _post(other_site, body, **headers).status_code == 400
    headers["HTTP_X_SHOPIFY_SHOP_DOMAIN"] = "someone-else.myshopify.com"
    assert _post(site, body, **headers).status_code == 400
    assert not WebhookEvent.objects.exists()


def test_refunds_and_disputes_webhooks_record_them_on_the_charge(site, shopify, shopify_account):
    placed = shopify.add_order(total="60.00")
    body = _order_body(placed)
    _post(site, body, **signed_headers(body, topic="orders/create", webhook_id="wh-o"))
    shopify._make_refund(placed, __import__("decimal").Decimal("20.00"), note="from the admin")
    refund = json.dumps({"id": 1, "order_id": placed.id, "note": "from the admin"}).encode()
    _post(site, refund, **signed_headers(refund, topic="refunds/create", webhook_id="wh-r"))
    assert Charge.objects.get().amount_refunded_outside_minor == 2000
    placed.disputes.append(
        {
            "id": "gid://shopify/ShopifyPaymentsDispute/7",
            "status": "NEEDS_RESPONSE",
            "initiatedAs": "CHARGEBACK",
        }
    )
    dispute = json.dumps({"id": 7, "order_id": placed.id, "status": "needs_response"}).encode()
    _post(site, dispute, **signed_headers(dispute, topic="disputes/create", webhook_id="wh-d"))
    assert Dispute.objects.get().status == "needs_response"


@pytest.mark.parametrize(
    "total", ["90071992547409.92", "-5.00"], ids=["past-signed-records", "negative"]
)
def test_an_order_sill_cannot_read_or_record_is_skipped_with_its_reason_not_retried(
    site, shopify, shopify_account, total
):
    # Each failed on every attempt (its signed record, the order's check constraint) until
    # the retries gave up, while the sync names the same order failed and reads on.
    placed = shopify.add_order(total=total)
    body = _order_body(placed)
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-odd")
    assert _post(site, body, **headers).status_code == 200
    event = WebhookEvent.objects.get(rail="shopify")
    assert event.processed_at is not None and event.last_error == ""
    assert event.outcome.startswith(f"skipped: Shopify order {placed.gid} is unreadable")
    assert not Order.objects.exists() and not Charge.objects.exists()


@pytest.mark.parametrize(
    ("quantity", "price"),
    [(3_000_000_000, "0.01"), (2**31 - 1, "100000000.00")],
    ids=["quantity-past-its-column", "lines-past-a-bigint"],
)
def test_an_order_whose_lines_sill_cannot_hold_comes_in_as_its_total(
    site, shopify, shopify_account, quantity, price
):
    # Shopify's total is the order's; its lines only describe it. These failed every attempt
    # (DataError: the line's quantity, the lines' sum) until the retries gave up.
    placed = shopify.add_order(total="89.00")
    placed.lines = [("BULK", "Bulk beans", quantity, Decimal(price))]
    body = _order_body(placed)
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-bulk")
    assert _post(site, body, **headers).status_code == 200
    event = WebhookEvent.objects.get(rail="shopify")
    assert event.processed_at is not None and event.outcome.startswith("created"), event
    order = Order.objects.get(site=site)
    assert order.total_minor == 8900 and Charge.objects.get(order=order).amount_minor == 8900
    assert [(i.name, i.quantity, i.unit_price_minor) for i in order.items.all()] == [
        ("Order total", 1, 8900)
    ]


def test_a_delivery_processed_after_the_site_switched_shops_asks_the_new_shop_nothing(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    """The stored event did not say which shop sent it: one checked against shop A but
    processed after the site was connected to shop B had its order read from B (with B's
    token), and was settled as "not found at Shopify". Shopify's order ids are global, so B
    never held it; the event is now settled in words that say why, asking B nothing."""
    from sill.rails.shopify.connect import configure_shopify
    from tests.rails.shopify_stub import SHOP, TOKEN, StubServer

    placed = shopify.add_order()
    body = _order_body(placed)
    with django_capture_on_commit_callbacks(execute=False) as enqueued:  # the task comes later
        response = Client().post(
            f"/webhooks/shopify/{site.pk}",
            body,
            content_type="application/json",
            **signed_headers(body, topic="orders/updated", webhook_id="wh-switch"),
        )
    assert response.status_code == 200 and len(enqueued) == 1
    settings.DEBUG = True  # the API address override (the loopback store) needs DEBUG
    with StubServer() as other:
        configure_shopify(
            site=site,
            actor=members["owner"].user,
            shop_domain="other-shop.myshopify.com",
            access_token=TOKEN,
            api_base=other.url,
            second_factor=two_factor.OPERATOR,
        )
        enqueued[0]()  # the task runs now (eager)
        assert other.calls == []
    event = WebhookEvent.objects.get(rail="shopify")
    assert event.processed_at is not None and (event.attempts, event.last_error) == (1, "")
    assert SHOP in event.outcome and "other-shop.myshopify.com" in event.outcome
    assert not Order.objects.exists() and [op for op, _ in shopify.calls] == []


def test_the_same_signed_body_under_a_fresh_webhook_id_is_a_duplicate(
    site, shopify, shopify_account, django_capture_on_commit_callbacks
):
    """Shopify's HMAC covers the body, not ``X-Shopify-Webhook-Id``: whoever captured one
    delivery could send its body again under fresh ids (and invented ``orders/…`` topics,
    whose header is not signed either), each one an order read from the shop's API budget
    and a task. The body is kept once per site: a replay is the duplicate a redelivery is."""
    placed = shopify.add_order()
    body = json.dumps(
        {"id": placed.id, "admin_graphql_api_id": placed.gid, "updated_at": "2026-12-01T10:00:00Z"}
    ).encode()
    headers = signed_headers(body, topic="orders/updated", webhook_id="wh-genuine")
    assert _post(site, body, **headers).json()["duplicate"] is False
    assert [op for op, _ in shopify.calls].count("SillOrder") == 1

    for webhook_id, topic in (("wh-replay-1", "orders/updated"), ("wh-replay-2", "orders/x")):
        headers = signed_headers(body, topic=topic, webhook_id=webhook_id)
        with django_capture_on_commit_callbacks(execute=True) as enqueued:
            replay = Client().post(
                f"/webhooks/shopify/{site.pk}", body, content_type="application/json", **headers
            )
        assert replay.status_code == 200
        assert replay.json() == {"received": True, "duplicate": True}
        assert enqueued == []
    assert [op for op, _ in shopify.calls].count("SillOrder") == 1
    assert list(WebhookEvent.objects.values_list("event_id", flat=True)) == ["wh-genuine"]

    # The order's next change is another body (Shopify's carry ``updated_at``): taken.
    changed = body.replace(b"10:00:00Z", b"10:00:01Z")
    headers = signed_headers(changed, topic="orders/updated", webhook_id="wh-next")
    assert _post(site, changed, **headers).json()["duplicate"] is False
    assert [op for op, _ in shopify.calls].count("SillOrder") == 2


def test_a_refund_sill_settled_that_shopify_reports_failed_is_reversed(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    """Shopify's refund transaction failed after Sill settled it (a closed card): the order's
    webhook reads it so, and Sill's refund is reversed as Stripe's and PayPal's are, not left
    counted as paid back until a reconciliation run."""
    from tests.rails.test_shopify_refunds import _execute, _refund

    placed = shopify.add_order(total="60.00")
    body = _order_body(placed)
    _post(site, body, **signed_headers(body, topic="orders/create", webhook_id="wh-o"))
    order = Order.objects.get()
    refund = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded"
    [made] = placed.refunds
    for transaction in made["transactions"]:
        transaction["status"] = "FAILURE"

    # Shopify's bodies carry updated_at: the order's change is another body.
    updated = json.dumps({**json.loads(body), "updated_at": "2026-12-07T10:00:00Z"}).encode()
    _post(site, updated, **signed_headers(updated, topic="orders/updated", webhook_id="wh-u"))

    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    charge = Charge.objects.get()
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (0, 0)
    assert charge.remaining.amount_minor == 6000
    assert Order.objects.get().status == "PAID"
    event = WebhookEvent.objects.get(event_id="wh-u")
    assert "reversed" in event.outcome


def test_a_shops_delivery_sent_to_another_shops_site_with_its_secret_records_nothing(
    site, other_site, shopify, shopify_account
):
    """``X-Shopify-Shop-Domain`` is not signed, and one app's client secret signs for every
    shop it is installed on, so Sill cannot refuse a secret two shops share, nor tell from a
    refund's or dispute's body which shop sent it. It need not: the body is a trigger, its
    order read from the site's own shop, and Shopify's order ids are global, so shop A's
    delivery taken as shop B's finds nothing at B and records nothing anywhere."""
    from sill.rails.models import RailAccount
    from tests.rails.shopify_fixtures import WEBHOOK_SECRET
    from tests.rails.shopify_stub import TOKEN, StubServer

    placed = shopify.add_order(total="60.00")
    shopify._make_refund(placed, __import__("decimal").Decimal("20.00"), note="from the admin")
    with StubServer() as other:
        account = RailAccount(
            site=other_site,
            rail="shopify",
            connected_account="other-shop.myshopify.com",
            api_base=other.url,
            enabled=True,
        )
        account.set_secret(TOKEN)
        account.set_webhook_secrets([WEBHOOK_SECRET])
        account.save()
        for topic, body in (
            ("orders/create", _order_body(placed)),
            ("refunds/create", json.dumps({"id": 1, "order_id": placed.id}).encode()),
        ):
            headers = signed_headers(body, topic=topic, webhook_id=f"wh-{topic}")
            headers["HTTP_X_SHOPIFY_SHOP_DOMAIN"] = "other-shop.myshopify.com"
            assert _post(other_site, body, **headers).status_code == 200
    outcomes = WebhookEvent.objects.filter(site=other_site).values_list("outcome", flat=True)
    assert sorted(outcomes) == [f"order {placed.id} not found at Shopify"] * 2
    assert not Order.objects.exists() and not Charge.objects.exists()
    assert shopify.calls == []  # shop A was asked nothing with B's token either


def test_partial_refunds_of_several_transactions_each_count_once_and_follow_their_state(
    site, shopify, shopify_account
):
    """Two partial refunds made in the Shopify admin, each taking several transactions (split
    across payment methods; one still pending): each counts its total once, whatever order
    and however often their webhooks come, and the pending one stops counting when its
    transactions fail."""
    placed = shopify.add_order(total="60.00")
    body = _order_body(placed)
    _post(site, body, **signed_headers(body, topic="orders/create", webhook_id="wh-o"))
    split = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    split["transactions"].append(
        {"id": f"gid://shopify/OrderTransaction/{shopify.new_id()}", "status": "SUCCESS",
         "kind": "REFUND"}
    )  # fmt: skip
    waiting = shopify._make_refund(placed, Decimal("15.00"), note="from the admin")
    for transaction in waiting["transactions"]:
        transaction["status"] = "PENDING"
    waiting["transactions"].append(
        {"id": f"gid://shopify/OrderTransaction/{shopify.new_id()}", "status": "PENDING",
         "kind": "REFUND"}
    )  # fmt: skip
    for n, _refund in enumerate([waiting, split, waiting]):
        refund = json.dumps({"id": n, "order_id": placed.id, "note": "from the admin"}).encode()
        _post(site, refund, **signed_headers(refund, topic="refunds/create", webhook_id=f"wh-r{n}"))
    charge = Charge.objects.get()
    assert (charge.amount_refunded_outside_minor, charge.remaining.amount_minor) == (3500, 2500)
    assert dict(ExternalRefund.objects.values_list("provider_refund_id", "status")) == {
        split["id"]: "succeeded",
        waiting["id"]: "pending",
    }

    for transaction in waiting["transactions"]:
        transaction["status"] = "FAILURE"
    # Shopify's body of the update differs from the creation's (its updated_at, at least).
    body = json.dumps({**json.loads(_order_body(placed)), "updated_at": "later"}).encode()
    _post(site, body, **signed_headers(body, topic="orders/updated", webhook_id="wh-u"))
    charge.refresh_from_db()
    assert (charge.amount_refunded_outside_minor, charge.remaining.amount_minor) == (2000, 4000)
    assert ExternalRefund.objects.get(provider_refund_id=waiting["id"]).counted_minor == 0
