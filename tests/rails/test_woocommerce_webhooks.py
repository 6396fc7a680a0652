"""``POST /webhooks/woocommerce/<site_id>``: verified, stored once, applied on commit."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from sill.accounts import two_factor
from sill.orders.models import Order
from sill.rails.models import WebhookEvent
from sill.rails.woocommerce.models import WooOrderLink
from tests.rails.woo_fixtures import woo_headers

pytestmark = pytest.mark.django_db


def _post(site, body: bytes, headers: dict, capture) -> object:
    with capture(execute=True):
        return Client().post(
            f"/webhooks/woocommerce/{site.pk}", body, content_type="application/json", **headers
        )


def test_a_signed_order_is_brought_in_once(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    placed = woo.add_order(total="42.00", stripe_charge="ch_hook1")
    body = json.dumps(placed.json()).encode()
    headers = woo_headers(body, url=woo.url, topic="order.created")
    first = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert first.status_code == 200 and first.json()["duplicate"] is False
    link = WooOrderLink.objects.get(site=site, woo_order_id=placed.id)
    assert link.order.total_minor == 4200
    # Redelivered (WooCommerce gives the retry a new delivery id): stored once, changes nothing.
    headers["HTTP_X_WC_WEBHOOK_DELIVERY_ID"] = "another-delivery"
    again = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert WebhookEvent.objects.filter(site=site, rail="woocommerce").count() == 1
    assert Order.objects.filter(site=site).count() == 1


def test_the_paid_state_of_the_same_second_is_not_a_duplicate(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    # A checkout creates the order pending and the gateway marks it paid, usually within the
    # second ``date_modified_gmt`` resolves: another state of the order, not a redelivery.
    placed = woo.add_order(total="42.00", stripe_charge="ch_same_second", paid=False)
    placed.status = "pending"
    unpaid = json.dumps(placed.json()).encode()
    first = _post(
        site, unpaid, woo_headers(unpaid, url=woo.url, topic="order.created"),
        django_capture_on_commit_callbacks,
    )  # fmt: skip
    assert first.status_code == 200 and first.json()["duplicate"] is False
    assert not Order.objects.filter(site=site).exists()  # not paid yet: skipped

    placed.status, placed.paid = "processing", True
    paid = json.dumps(placed.json()).encode()
    second = _post(site, paid, woo_headers(paid, url=woo.url), django_capture_on_commit_callbacks)
    assert second.status_code == 200 and second.json() == {"received": True, "duplicate": False}
    assert WooOrderLink.objects.get(site=site, woo_order_id=placed.id).order.total_minor == 4200


def test_a_change_of_the_same_second_updates_the_order(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    placed = woo.add_order(total="42.00", stripe_charge="ch_email")
    body = json.dumps(placed.json()).encode()
    _post(site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks)
    placed.email = "new-address@example.com"  # date_modified_gmt unchanged
    changed = json.dumps(placed.json()).encode()
    response = _post(
        site, changed, woo_headers(changed, url=woo.url), django_capture_on_commit_callbacks
    )
    assert response.json()["duplicate"] is False
    order = WooOrderLink.objects.get(site=site, woo_order_id=placed.id).order
    assert order.buyer_email == "new-address@example.com"
    assert WebhookEvent.objects.get(type="order.updated", payload=changed.decode()).outcome == (
        "updated"
    )


def test_a_bad_signature_is_400_and_records_nothing(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    placed = woo.add_order(stripe_charge="ch_bad")
    body = json.dumps(placed.json()).encode()
    headers = woo_headers(body, url=woo.url, secret="not-the-secret")
    response = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    tampered = _post(
        site, body + b" ", woo_headers(body, url=woo.url), django_capture_on_commit_callbacks
    )
    assert tampered.status_code == 400
    assert not WebhookEvent.objects.exists()
    assert not Order.objects.exists()


def test_another_sites_store_or_secret_is_refused(
    site, other_site, woo, woo_account, django_capture_on_commit_callbacks
):
    placed = woo.add_order(stripe_charge="ch_other")
    body = json.dumps(placed.json()).encode()
    assert (
        _post(
            other_site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks
        ).status_code
        == 400
    )
    headers = woo_headers(body, url="https://evil.example")
    assert _post(site, body, headers, django_capture_on_commit_callbacks).status_code == 400
    assert not WebhookEvent.objects.exists()


@pytest.mark.parametrize("topic", ["product.updated", "order.deleted", "action.wc_x"])
def test_a_signed_delivery_of_a_topic_sill_does_not_take_is_400_and_stores_nothing(
    site, woo, woo_account, topic, django_capture_on_commit_callbacks
):
    """Not 200 "ignored": a WooCommerce webhook has one topic and its own count of failed
    deliveries (WC_Webhook::failed_delivery: past five non-2xx in a row it is disabled), so
    the 400 disables only the webhook Sill does not take, never the order ones, and the store
    shows the merchant that webhook disabled with Sill's reason instead of sending every
    product change here for good."""
    order = woo.add_order(stripe_charge="ch_topic").json()
    body = json.dumps({"id": order["id"]} if topic == "order.deleted" else order).encode()
    response = _post(
        site, body, woo_headers(body, url=woo.url, topic=topic), django_capture_on_commit_callbacks
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert "order.created and order.updated" in response.json()["error"]["message"]
    assert not WebhookEvent.objects.exists() and not Order.objects.exists()


def test_the_creation_ping_is_answered_and_stored_nowhere(site, woo, woo_account):
    response = Client().post(
        f"/webhooks/woocommerce/{site.pk}",
        "webhook_id=12",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200
    assert response.json() == {"received": True, "ping": True}
    assert not WebhookEvent.objects.exists()


@pytest.mark.parametrize(
    "body", [b"[]", b'{"id": 1, "a": "\\u0000"}', b"{" * 40 + b"}" * 40, b"\xff"]
)
def test_signed_garbage_is_400_never_a_500(
    site, woo, woo_account, body, django_capture_on_commit_callbacks
):
    response = _post(site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert not WebhookEvent.objects.exists()


def _connect(site, owner, store) -> None:
    """What Settings → Rails saves when the merchant connects the site to another store."""
    from sill.rails.woocommerce.connect import configure_woocommerce
    from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET

    configure_woocommerce(
        site=site,
        actor=owner,
        store_url=store.url,
        consumer_key=CONSUMER_KEY,
        consumer_secret=CONSUMER_SECRET,
        webhook_secret="store-b-webhook-secret",
        second_factor=two_factor.OPERATOR,
    )


def test_a_delivery_processed_after_the_site_switched_stores_is_not_filed_as_the_new_ones(
    site, members, woo, woo_account, django_capture_on_commit_callbacks
):
    """Woo order ids are per store, and the stored event did not say which store sent it: a
    delivery checked against store A but processed after the site was connected to store B
    was filed under B, and B's order 1001 took A's buyer. It is now settled, filing nothing."""
    from datetime import timedelta

    from sill.rails.woocommerce.sync import sync_orders
    from tests.rails.woo_stub import StubServer

    placed = woo.add_order(total="42.00", stripe_charge="ch_store_a", email="a@example.com")
    body = json.dumps(placed.json()).encode()
    with django_capture_on_commit_callbacks(execute=False) as enqueued:  # the task comes later
        response = Client().post(
            f"/webhooks/woocommerce/{site.pk}",
            body,
            content_type="application/json",
            **woo_headers(body, url=woo.url),
        )
    assert response.status_code == 200 and len(enqueued) == 1
    with StubServer() as other:
        theirs = other.add_order(
            total="20.00",
            stripe_charge="ch_store_b",
            email="b@example.com",
            modified_at=placed.modified_at - timedelta(hours=1),
        )
        assert theirs.id == placed.id
        _connect(site, members["owner"].user, other)
        assert sync_orders(site=site).created == 1
        asked = len(other.order_queries)
        enqueued[0]()  # the task runs now (eager)
        assert len(other.order_queries) == asked and other.refund_posts == []
    event = WebhookEvent.objects.get(site=site, rail="woocommerce")
    assert event.processed_at is not None and (event.attempts, event.last_error) == (1, "")
    assert event.outcome.startswith("skipped:")
    assert woo.url in event.outcome and other.url in event.outcome
    link = WooOrderLink.objects.get(site=site)
    assert link.store_url == other.url and link.order.buyer_email == "b@example.com"
    assert Order.objects.filter(site=site).count() == 1


def test_a_replay_after_the_site_switched_stores_settles_the_old_stores_event(
    site, members, woo, woo_account, django_capture_on_commit_callbacks
):
    """``rails replay-webhooks`` attempts a given-up event again: one from the store the site
    was connected to before is settled with words, not filed under the store connected now."""
    from datetime import timedelta
    from io import StringIO

    from django.core.management import call_command
    from django.utils import timezone

    from tests.rails.woo_stub import StubServer

    placed = woo.add_order(total="42.00", stripe_charge="ch_given_up")
    body = json.dumps(placed.json()).encode()
    with django_capture_on_commit_callbacks(execute=False):
        Client().post(
            f"/webhooks/woocommerce/{site.pk}",
            body,
            content_type="application/json",
            **woo_headers(body, url=woo.url, topic="order.created"),
        )
    WebhookEvent.objects.update(attempts=5, gave_up_at=timezone.now())
    with StubServer() as other:
        _connect(site, members["owner"].user, other)
        asked = len(other.order_queries)  # the key check
        out = StringIO()
        call_command(
            "rails", "replay-webhooks", "--site", site.pk, "--rail", "woocommerce",
            "--since", (timezone.now() - timedelta(days=1)).date().isoformat(), stdout=out,
        )  # fmt: skip
        assert len(other.order_queries) == asked and other.refund_posts == []
    assert "1 processed, 0 failed" in out.getvalue(), out.getvalue()
    event = WebhookEvent.objects.get(site=site, rail="woocommerce")
    assert event.processed_at is not None and woo.url in event.outcome
    assert not Order.objects.exists() and not WooOrderLink.objects.exists()


def test_the_same_signed_body_under_a_fresh_delivery_id_is_a_duplicate(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    """WooCommerce's signature covers the body, not ``X-WC-Webhook-Delivery-ID``. A body
    without ``date_modified_gmt`` was named by its delivery id, so whoever captured it could
    send it again under fresh ids, each one stored and a task. The body is kept once per
    site, whatever names it: a replay is the duplicate a redelivery is, and does nothing."""
    placed = woo.add_order(total="42.00", stripe_charge="ch_replayed")
    order = placed.json()
    del order["date_modified_gmt"]
    body = json.dumps(order).encode()
    headers = woo_headers(body, url=woo.url, topic="order.created")
    first = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert first.status_code == 200 and first.json()["duplicate"] is False
    assert WooOrderLink.objects.filter(site=site, woo_order_id=placed.id).exists()
    asked = len(woo.auth_seen)

    for delivery, topic in (("replay-1", "order.created"), ("replay-2", "order.updated")):
        headers = woo_headers(body, url=woo.url, topic=topic)
        headers["HTTP_X_WC_WEBHOOK_DELIVERY_ID"] = delivery
        with django_capture_on_commit_callbacks(execute=True) as enqueued:
            replay = Client().post(
                f"/webhooks/woocommerce/{site.pk}",
                body,
                content_type="application/json",
                **headers,
            )
        assert replay.status_code == 200
        assert replay.json() == {"received": True, "duplicate": True}
        assert enqueued == []
    assert len(woo.auth_seen) == asked
    assert WebhookEvent.objects.filter(site=site, rail="woocommerce").count() == 1
    assert Order.objects.filter(site=site).count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"id": True},
        {"id": -5},
        {"id": 10**30},
        {"meta_data": 5},
        {"line_items": 5},
        {"total": "90071992547409.92"},
        {"id": 2**53},
        {"meta_data": [{"key": "_stripe_charge_id", "value": "ch_" + "x" * 300}]},
        {"transaction_id": "pi_" + "x" * 300, "meta_data": []},
    ],
    ids=[
        "id-true",
        "id-negative",
        "id-past-bigint",
        "meta-number",
        "lines-number",
        "total-past-signed-records",
        # Its charge's signed record names the Woo order id: failed on every attempt.
        "id-past-signed-records",
        # Longer than a charge's Stripe ids hold (DataError on every attempt).
        "charge-id-too-long",
        "intent-id-too-long",
    ],
)
def test_a_signed_order_of_the_wrong_shapes_is_skipped_not_retried(
    site, woo, woo_account, change, django_capture_on_commit_callbacks
):
    # ``true`` was brought in as the store's order 1 and -5 as order -5; the others raised on
    # every attempt (DataError, TypeError) until the retries gave up.
    order = woo.add_order(total="42.00", stripe_charge="ch_shapes").json()
    body = json.dumps({**order, **change}).encode()
    response = _post(site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks)
    assert response.status_code == 200
    stored = WebhookEvent.objects.get(site=site, rail="woocommerce")
    assert stored.processed_at is not None and stored.outcome.startswith("skipped")
    assert stored.last_error == ""
    assert not Order.objects.exists() and not WooOrderLink.objects.exists()


def _connected(site, store) -> None:
    """``site`` connected to ``store`` with the webhook secret ``woo_account``'s store has: a
    merchant reusing one secret for two stores."""
    from sill.rails.models import RailAccount
    from tests.rails.woo_fixtures import WEBHOOK_SECRET

    account = RailAccount(site=site, rail="woocommerce", connected_account=store.url, enabled=True)
    account.set_webhook_secrets([WEBHOOK_SECRET])
    account.save()


@pytest.mark.parametrize("source", ["forged", "removed"])
def test_a_body_signed_for_one_store_is_not_taken_as_anothers_that_shares_its_secret(
    site, other_site, woo, woo_account, source, django_capture_on_commit_callbacks
):
    """The signature says which secret signed the body, not which store sent it, and the
    X-WC-Webhook-Source header is not signed: store A's delivery, sent to the site of store B
    (which has A's secret) with the header naming B or left out, was filed as B's order of
    that id. The body names its store itself (``_links``, signed): another store's is 400."""
    from tests.rails.woo_stub import StubServer

    placed = woo.add_order(total="42.00", stripe_charge="ch_store_a", email="a@example.com")
    body = json.dumps(placed.json()).encode()
    with StubServer() as other:
        _connected(other_site, other)
        headers = woo_headers(body, url=other.url)
        if source == "removed":
            del headers["HTTP_X_WC_WEBHOOK_SOURCE"]
        response = _post(other_site, body, headers, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert "another store" in response.json()["error"]["message"]
    assert not WebhookEvent.objects.exists()
    assert not Order.objects.exists() and not WooOrderLink.objects.exists()
    # Sent to its own store's site, the same delivery is taken.
    taken = _post(site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks)
    assert taken.status_code == 200 and taken.json()["duplicate"] is False
    assert WooOrderLink.objects.get(woo_order_id=placed.id).store_url == woo.url


def test_an_order_naming_no_store_is_refused_when_another_store_shares_its_secret(
    site, other_site, woo, woo_account, django_capture_on_commit_callbacks
):
    """A body without ``_links`` names no store: only the unsigned X-WC-Webhook-Source header
    says whose it is. Seen: store A's delivery stripped of its links, sent to the site of
    store B (which has A's secret) with the header naming B, was filed as B's order of that
    id. While another store holds the secret that signs it, such a body is refused, at either
    site; with a secret of its own, the store's body is taken."""
    from tests.rails.woo_stub import StubServer

    order = woo.add_order(total="42.00", stripe_charge="ch_store_a").json()
    del order["_links"]
    body = json.dumps(order).encode()
    with StubServer() as other:
        _connected(other_site, other)
        for to, store in ((other_site, other), (site, woo)):
            response = _post(
                to, body, woo_headers(body, url=store.url), django_capture_on_commit_callbacks
            )
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "webhook_store_unknown"
            assert "secret of its own" in response.json()["error"]["message"]
        assert not WebhookEvent.objects.exists()
        assert not Order.objects.exists() and not WooOrderLink.objects.exists()
        # Given a secret of its own, store B no longer shares A's: A's body is taken at A's site.
        from sill.rails.models import RailAccount

        b = RailAccount.objects.get(site=other_site, rail="woocommerce")
        b.set_webhook_secrets(["store-b-webhook-secret"])
        b.save()
        taken = _post(
            site, body, woo_headers(body, url=woo.url), django_capture_on_commit_callbacks
        )
    assert taken.status_code == 200 and taken.json()["duplicate"] is False
    assert WooOrderLink.objects.get(woo_order_id=order["id"]).store_url == woo.url


@pytest.mark.parametrize(
    ("href", "another"),
    [
        ("https://shop.example/wp-json/wc/v3/orders/7", False),
        ("http://Shop.Example/wp-json/wc/v3/orders/7", False),
        ("https://shop.example/index.php/wp-json/wc/v3/orders/7", False),
        ("https://shop.example/index.php?rest_route=/wc/v3/orders/7", False),
        ("https://shop.example/?rest_route=/wc/v3/orders/7", False),
        ("https://other.example/wp-json/wc/v3/orders/7", True),
        ("https://shop.example/de/wp-json/wc/v3/orders/7", True),
        ("https://shop.example:8443/wp-json/wc/v3/orders/7", True),
        ("https://shop.example:443/wp-json/wc/v3/orders/7", False),
        ("http://shop.example:80/wp-json/wc/v3/orders/7", False),
        ("https://other.example/elsewhere/7", False),
        (7, False),
        (None, False),
    ],
    ids=[
        "same", "scheme-and-case", "pathinfo", "plain-permalinks", "plain-at-root",
        "other-host", "subdirectory", "other-port", "https-default-port", "http-default-port",
        "not-rest", "not-text", "no-links",
    ],
)  # fmt: skip
def test_the_store_an_order_belongs_to_is_read_from_its_own_link(href, another):
    """WordPress writes the link http or https as the request building it was, so the scheme
    does not count; a subdirectory is another store (a WordPress network's sites); a body
    without a REST link names no store and is judged on its header alone."""
    from sill.rails.woocommerce.orders import names_another_store

    order = {"id": 7} if href is None else {"id": 7, "_links": {"self": [{"href": href}]}}
    assert names_another_store(order, store_url="https://shop.example") is another


def test_the_source_header_is_compared_as_the_orders_link_is(
    site, woo, woo_account, django_capture_on_commit_callbacks
):
    # WordPress names its home http or https as it is configured, whichever address the
    # merchant pasted; the header was compared as text, so a store behind TLS whose WordPress
    # still said http:// had every delivery refused (and one saved with ":443" too).
    placed = woo.add_order(total="42.00", stripe_charge="ch_hook_scheme")
    body = json.dumps(placed.json()).encode()
    headers = woo_headers(body, url=woo.url.replace("http://", "https://"), topic="order.created")
    answer = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert answer.status_code == 200 and answer.json()["duplicate"] is False
    assert WooOrderLink.objects.filter(site=site, woo_order_id=placed.id).exists()
    headers = woo_headers(body, url="http://elsewhere.example", topic="order.created")
    refused = _post(site, body, headers, django_capture_on_commit_callbacks)
    assert refused.status_code == 400


def test_a_store_saved_with_its_default_port_is_the_store_its_links_name_without_it():
    # A merchant may paste the address with ":443"; WordPress writes its links without it.
    from sill.rails.woocommerce.orders import names_another_store

    order = {"id": 7, "_links": {"self": [{"href": "https://shop.example/wp-json/wc/v3/orders/7"}]}}
    assert names_another_store(order, store_url="https://shop.example:443/") is False
    assert names_another_store(order, store_url="https://shop.example:8443/") is True


def test_another_store_is_connected_with_a_webhook_secret_of_its_own(
    site, members, woo, woo_account, django_capture_on_commit_callbacks
):
    """Connected to store B with the webhook secret left empty, the site kept store A's: A's
    webhook, and whoever holds its secret (it is shown on A's webhook in WooCommerce), could
    still sign orders Sill filed as B's. Another store now needs its own secret, and not A's
    again, as it needs its own keys; nothing is asked of B until it has one."""
    from sill.rails.models import RailAccount
    from sill.rails.services import RailSettingsError
    from sill.rails.woocommerce.connect import configure_woocommerce
    from tests.rails.woo_fixtures import WEBHOOK_SECRET
    from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, StubServer

    def connect(store, webhook_secret: str) -> None:
        configure_woocommerce(
            site=site, actor=members["owner"].user, store_url=store.url,
            consumer_key=CONSUMER_KEY, consumer_secret=CONSUMER_SECRET,
            webhook_secret=webhook_secret, second_factor=two_factor.OPERATOR,
        )  # fmt: skip

    with StubServer() as other:
        for given, words in (("", "Enter the webhook secret of"), (WEBHOOK_SECRET, "of its own")):
            with pytest.raises(RailSettingsError, match=words) as refused:
                connect(other, given)
            assert refused.value.field == "webhook_secret"
        assert other.auth_seen == []
        account = RailAccount.objects.get(pk=woo_account.pk)
        assert account.connected_account == woo.url
        assert account.get_webhook_secrets() == [WEBHOOK_SECRET]

        connect(other, "store-b-webhook-secret")
        account.refresh_from_db()
        assert account.connected_account == other.url
        assert account.get_webhook_secrets() == ["store-b-webhook-secret"]
        # A's delivery, signed with A's secret and naming no store, is no longer taken.
        order = woo.add_order(stripe_charge="ch_a").json()
        del order["_links"]
        body = json.dumps(order).encode()
        headers = woo_headers(body, url=woo.url)
        del headers["HTTP_X_WC_WEBHOOK_SOURCE"]
        assert _post(site, body, headers, django_capture_on_commit_callbacks).status_code == 400
    # Saved again for the same store, an empty secret keeps the saved one, as before.
    connect(woo, "store-a-webhook-secret")
    connect(woo, "")
    assert RailAccount.objects.get(pk=woo_account.pk).get_webhook_secrets() == [
        "store-a-webhook-secret"
    ]
