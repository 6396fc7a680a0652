"""PayPal webhooks at ``/webhooks/paypal/<site_id>``, verified through the loopback PayPal's
``verify-webhook-signature`` (tests/rails/paypal_stub.py), stored once, processed by the
``rails.process_paypal_event`` task (eager here): outside refunds and disputes on the charge."""

from __future__ import annotations

import json
import secrets
import uuid
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.test import Client

from audit.models import AuditRecord
from refunds.staff.services import NotRefundable
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Dispute, ExternalRefund
from sill.rails.models import WebhookEvent
from tests.rails.paypal_stub import WEBHOOK_ID, PayPalStub
from tests.rails.test_paypal_refunds import _execute, _refund

pytestmark = pytest.mark.django_db
CERT = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-1d93a270"


@pytest.fixture(autouse=True)
def own_counters(settings):
    """Rate counters and remembered transmissions of this test only: the default cache under
    a key prefix of its own (every test's site has the same id)."""
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


def _now() -> str:
    # PayPal's times carry milliseconds: two events of one dispute in a second stay ordered.
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def refund_event(
    paypal: PayPalStub,
    capture,
    *,
    value: str,
    custom_id: str = "",
    refund_id="",
    held: bool = True,
):
    """The event of a refund of ``capture``; ``held``: PayPal's API holds the refund it
    names, as the event says (unless it holds one of that id already)."""
    refund_id = refund_id or f"RF{secrets.token_hex(6).upper()}"
    if held and paypal.held_refund(refund_id) is None:
        paypal.add_refund(capture, value=value, refund_id=refund_id, custom_id=custom_id)
    return {
        "id": f"WH-{secrets.token_hex(8).upper()}",
        "event_version": "1.0",
        "create_time": _now(),
        "resource_type": "refund",
        "resource_version": "2.0",
        "event_type": "PAYMENT.CAPTURE.REFUNDED",
        "summary": f"A {value} USD capture payment was refunded",
        "resource": {
            "id": refund_id,
            "status": "COMPLETED",
            "amount": {"value": value, "currency_code": "USD"},
            **({"custom_id": custom_id} if custom_id else {}),
            "create_time": _now(),
            "update_time": _now(),
            "links": [
                {"href": f"{paypal.url}/v2/payments/refunds/{refund_id}", "rel": "self"},
                {"href": f"{paypal.url}/v2/payments/captures/{capture.id}", "rel": "up"},
            ],
        },
    }


def dispute_event(
    paypal: PayPalStub,
    capture,
    *,
    kind: str = "CREATED",
    status: str = "OPEN",
    outcome: str = "",
    held: bool = True,
):
    """The event of a dispute of ``capture``; ``held``: PayPal's API holds the dispute as the
    event says."""
    resource = {
        "dispute_id": "PP-D-27803",
        "create_time": "2026-01-02T10:00:00.000Z",
        "update_time": _now(),
        "disputed_transactions": [
            {"seller_transaction_id": capture.id, "seller": {"merchant_id": "RD465XN5VS364"}}
        ],
        "reason": "MERCHANDISE_OR_SERVICE_NOT_RECEIVED",
        "status": status,
        "dispute_amount": {"currency_code": "USD", "value": "89.00"},
        "dispute_life_cycle_stage": "INQUIRY",
        "dispute_channel": "INTERNAL",
    }
    if outcome:
        resource["dispute_outcome"] = {"outcome_code": outcome}
    if held:
        paypal.put_dispute(resource)
    return {
        "id": f"WH-{secrets.token_hex(8).upper()}",
        "create_time": _now(),
        "resource_type": "dispute",
        "event_type": f"CUSTOMER.DISPUTE.{kind}",
        "resource": resource,
    }


def deliver(
    site, paypal: PayPalStub, event, *, body: bytes | None = None, signed: bytes = b"", **drop
):
    """POST ``event`` as PayPal does: compact JSON and the five PAYPAL-* headers, signed
    over ``signed`` (default: the body sent)."""
    raw = body if body is not None else json.dumps(event, separators=(",", ":")).encode()
    transmission_id, when = secrets.token_hex(16), _now()
    headers = {
        "HTTP_PAYPAL_TRANSMISSION_ID": transmission_id,
        "HTTP_PAYPAL_TRANSMISSION_TIME": when,
        "HTTP_PAYPAL_TRANSMISSION_SIG": paypal.sign(
            transmission_id=transmission_id, transmission_time=when, body=signed or raw
        ),
        "HTTP_PAYPAL_CERT_URL": CERT,
        "HTTP_PAYPAL_AUTH_ALGO": "SHA256withRSA",
    }
    for name in drop:
        headers.pop(name)
    return Client().post(
        f"/webhooks/paypal/{site.pk}", raw, content_type="application/json", **headers
    )


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    def send(*args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return deliver(*args, **kwargs)

    return send


def test_a_verified_outside_refund_is_recorded_once_and_caps_the_next_refund(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="89.00")
    event = refund_event(paypal, capture, value="30.00")
    response = run(site, paypal, event)
    assert response.status_code == 200 and response.json() == {
        "received": True,
        "duplicate": False,
    }
    # PayPal was asked, with the headers, the webhook id and the event as sent.
    [asked] = paypal.verifications
    assert asked["webhook_id"] == WEBHOOK_ID and asked["auth_algo"] == "SHA256withRSA"
    assert asked["cert_url"] == CERT and asked["webhook_event"] == event
    again = run(site, paypal, event)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    [stored] = WebhookEvent.objects.filter(site=site, rail="paypal")
    assert stored.processed_at is not None and "external refund recorded" in stored.outcome
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert (outside.amount_minor, outside.counted_minor, outside.status) == (
        3000,
        3000,
        "succeeded",
    )
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 3000

    # $59.00 is left: asking for $60.00 is refused before PayPal is called.
    with pytest.raises(SillError, match=r"At most \$59\.00") as refused:
        _refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="amount",
            amount=Money(6000, "USD"),
        )
    assert refused.value.code == "exceeds_refundable" and paypal.refund_calls == []


def test_sills_own_refund_reported_by_paypal_is_not_an_outside_refund(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    refund = _refund(
        site,
        members,
        order,
        django_capture_on_commit_callbacks,
        kind="amount",
        amount=Money(1000, "USD"),
    )
    refund, _ = _execute(refund)
    made = capture.refunds[0]
    by_custom_id = refund_event(
        paypal, capture, value="10.00", custom_id=refund.pk, refund_id=made["id"]
    )
    assert run(site, paypal, by_custom_id).status_code == 200
    # A copy without custom_id (e.g. an older event version) is still Sill's, by refund id.
    by_refund_id = refund_event(paypal, capture, value="10.00", refund_id=made["id"])
    assert run(site, paypal, by_refund_id).status_code == 200
    assert not ExternalRefund.objects.exists()
    outcomes = list(WebhookEvent.objects.order_by("pk").values_list("outcome", flat=True))
    assert "Sill's own refund" in outcomes[0] and "Sill's own refund" in outcomes[1]
    assert Charge.objects.get(order=order).amount_refunded_minor == 1000


def test_a_dispute_refuses_the_next_refund_until_it_is_resolved(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    assert run(site, paypal, dispute_event(paypal, capture)).status_code == 200
    dispute = Dispute.objects.get(charge__order=order)
    assert (dispute.status, dispute.rail_status, dispute.amount_minor) == (
        "needs_response",
        "OPEN",
        8900,
    )
    with pytest.raises(NotRefundable, match="disputed") as refused:
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refused.value.__cause__.code == "disputed"

    waiting = dispute_event(paypal, capture, kind="UPDATED", status="WAITING_FOR_BUYER_RESPONSE")
    run(site, paypal, waiting)
    assert Dispute.objects.get(pk=dispute.pk).status == "under_review"
    resolved = dispute_event(
        paypal, capture, kind="RESOLVED", status="RESOLVED", outcome="RESOLVED_SELLER_FAVOUR"
    )
    run(site, paypal, resolved)
    dispute.refresh_from_db()
    assert (dispute.status, dispute.rail_status) == ("won", "RESOLVED:RESOLVED_SELLER_FAVOUR")
    refund, _ = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded" and len(paypal.refund_calls) == 1
    assert Dispute.objects.count() == 1


def test_a_body_paypal_does_not_verify_is_400_and_stores_nothing(
    site, paypal, paypal_account, paypal_order, run
):
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    signed = json.dumps(event, separators=(",", ":")).encode()
    forged = json.dumps({**event, "summary": "changed"}, separators=(",", ":")).encode()
    response = run(site, paypal, event, body=forged, signed=signed)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert len(paypal.verifications) == 1
    assert not WebhookEvent.objects.exists() and not ExternalRefund.objects.exists()


@pytest.mark.parametrize(
    "header",
    [
        "HTTP_PAYPAL_TRANSMISSION_ID",
        "HTTP_PAYPAL_TRANSMISSION_TIME",
        "HTTP_PAYPAL_TRANSMISSION_SIG",
        "HTTP_PAYPAL_CERT_URL",
        "HTTP_PAYPAL_AUTH_ALGO",
    ],
)
def test_a_missing_header_is_400_without_asking_paypal(
    site, paypal, paypal_account, paypal_order, run, header
):
    _order, capture = paypal_order()
    response = run(site, paypal, refund_event(paypal, capture, value="5.00"), **{header: True})
    assert response.status_code == 400
    assert header.removeprefix("HTTP_").replace("_", "-") in response.json()["error"]["message"]
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"id":"WH-1","id":"WH-2","event_type":"PAYMENT.CAPTURE.REFUNDED"}',
        b"[" * 40 + b"]" * 40,
        b'{"id":"WH-1"}',
        b'{"id":"WH-\\u0000","event_type":"X"}',
        b'{"id":5,"event_type":"PAYMENT.CAPTURE.REFUNDED"}',
        b"\xff\xfe",
    ],
)
def test_a_malformed_body_is_400_and_never_a_500(site, paypal, paypal_account, run, body):
    response = run(site, paypal, {}, body=body)
    assert response.status_code == 400
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


def test_another_site_or_no_webhook_id_is_refused(
    site, other_site, paypal, paypal_account, paypal_order, run
):
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    assert run(other_site, paypal, event).status_code == 400
    paypal_account.config = {**paypal_account.config, "webhook_id": ""}
    paypal_account.save()
    response = run(site, paypal, event)
    assert response.status_code == 400 and "webhook id" in response.json()["error"]["message"]
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


def test_paypal_not_answering_the_verification_is_503_and_stores_nothing(
    site, paypal, paypal_account, paypal_order, run
):
    _order, capture = paypal_order()
    paypal_account.api_base = "http://127.0.0.1:9"  # nothing listens there
    paypal_account.save()
    response = run(site, paypal, refund_event(paypal, capture, value="5.00"))
    assert response.status_code == 503 and not WebhookEvent.objects.exists()


def test_get_is_not_allowed(site, paypal_account):
    assert Client().get(f"/webhooks/paypal/{site.pk}").status_code == 405


# --- asking PayPal costs a call with the merchant's credentials: never for nothing ----------


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("HTTP_PAYPAL_AUTH_ALGO", "none"),
        ("HTTP_PAYPAL_CERT_URL", "https://attacker.example/v1/notifications/certs/CERT-1"),
        ("HTTP_PAYPAL_CERT_URL", "http://api.paypal.com/v1/notifications/certs/CERT-1"),
        (
            "HTTP_PAYPAL_CERT_URL",
            "https://api.paypal.com.attacker.example/v1/notifications/certs/C",
        ),
        ("HTTP_PAYPAL_CERT_URL", "https://api.paypal.com/somewhere/else"),
        # A port urlsplit cannot read: refused, not a 500 (``.port`` raises ValueError).
        ("HTTP_PAYPAL_CERT_URL", "https://api.paypal.com:abc/v1/notifications/certs/C"),
        ("HTTP_PAYPAL_CERT_URL", "https://api.paypal.com:99999/v1/notifications/certs/C"),
    ],
)
def test_headers_paypal_never_sends_are_refused_without_asking_paypal(
    site, paypal, paypal_account, paypal_order, header, value
):
    """Each delivery Sill cannot check itself costs a verify-webhook-signature call (and a
    token) with the merchant's PayPal credentials: anyone who knows a site id could spend
    the merchant's PayPal API budget, which its refunds need. What PayPal never sends is
    refused first."""
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    raw = json.dumps(event, separators=(",", ":")).encode()
    headers = {
        "HTTP_PAYPAL_TRANSMISSION_ID": "a" * 32,
        "HTTP_PAYPAL_TRANSMISSION_TIME": _now(),
        "HTTP_PAYPAL_TRANSMISSION_SIG": "x" * 40,
        "HTTP_PAYPAL_CERT_URL": CERT,
        "HTTP_PAYPAL_AUTH_ALGO": "SHA256withRSA",
        header: value,
    }
    response = Client().post(
        f"/webhooks/paypal/{site.pk}", raw, content_type="application/json", **headers
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


def test_an_event_already_stored_is_answered_without_asking_paypal_again(
    site, paypal, paypal_account, paypal_order, run
):
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    assert run(site, paypal, event).json() == {"received": True, "duplicate": False}
    again = run(site, paypal, event)
    assert again.status_code == 200 and again.json() == {"received": True, "duplicate": True}
    assert len(paypal.verifications) == 1 and WebhookEvent.objects.count() == 1


def test_verifications_per_site_are_limited_and_the_rest_asked_to_come_again(
    site, paypal, paypal_account, paypal_order, run, settings
):
    """A flood of deliveries with made-up signatures: PayPal is asked at most the site's
    budget a minute; past it the answer is 429 with Retry-After (PayPal delivers again
    later), and PayPal is not asked."""
    settings.SILL_API_RATES = {**settings.SILL_API_RATES, "paypal_verify": "2/minute"}
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    signed = json.dumps(event, separators=(",", ":")).encode()
    for n in range(2):
        forged = {**event, "id": f"WH-FORGED-{n}"}
        assert run(site, paypal, forged, signed=signed).status_code == 400
    later = run(site, paypal, refund_event(paypal, capture, value="5.00"))
    assert later.status_code == 429 and int(later["Retry-After"]) >= 1
    assert later.json()["error"]["code"] == "rate_limited"
    assert len(paypal.verifications) == 2 and not WebhookEvent.objects.exists()


# --- junk is refused before PayPal is asked; one client cannot starve the site --------------


def _post(site, raw: bytes, *, address: str = "127.0.0.1", **headers):
    return Client(REMOTE_ADDR=address).post(
        f"/webhooks/paypal/{site.pk}", raw, content_type="application/json", **headers
    )


def _signed_headers(paypal: PayPalStub, raw: bytes, *, transmission_id: str = "", when=""):
    """The five PAYPAL-* headers PayPal would send with ``raw``."""
    transmission_id = transmission_id or secrets.token_hex(16)
    when = when or _now()
    return {
        "HTTP_PAYPAL_TRANSMISSION_ID": transmission_id,
        "HTTP_PAYPAL_TRANSMISSION_TIME": when,
        "HTTP_PAYPAL_TRANSMISSION_SIG": paypal.sign(
            transmission_id=transmission_id, transmission_time=when, body=raw
        ),
        "HTTP_PAYPAL_CERT_URL": CERT,
        "HTTP_PAYPAL_AUTH_ALGO": "SHA256withRSA",
    }


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("HTTP_PAYPAL_TRANSMISSION_ID", "not an id"),
        ("HTTP_PAYPAL_TRANSMISSION_ID", "a" * 51),
        ("HTTP_PAYPAL_TRANSMISSION_ID", "é" * 10),
        ("HTTP_PAYPAL_TRANSMISSION_TIME", "yesterday"),
        ("HTTP_PAYPAL_TRANSMISSION_TIME", "1700000000"),
        ("HTTP_PAYPAL_TRANSMISSION_TIME", "2026-13-45T99:00:00Z"),
        # No zone: not a moment in time.
        ("HTTP_PAYPAL_TRANSMISSION_TIME", "2026-01-02T10:00:00"),
        # Older than PayPal's three days of retries.
        pytest.param(
            "HTTP_PAYPAL_TRANSMISSION_TIME",
            _iso(datetime.now(UTC) - timedelta(days=5)),
            id="HTTP_PAYPAL_TRANSMISSION_TIME-five-days-ago",  # a test id the same in every process
        ),
        # Ahead of our clock by more than any skew.
        pytest.param(
            "HTTP_PAYPAL_TRANSMISSION_TIME",
            _iso(datetime.now(UTC) + timedelta(hours=1)),
            id="HTTP_PAYPAL_TRANSMISSION_TIME-an-hour-ahead",
        ),
        ("HTTP_PAYPAL_TRANSMISSION_SIG", "not base64 at all!"),
        ("HTTP_PAYPAL_TRANSMISSION_SIG", "QUJD="),  # bad padding
        ("HTTP_PAYPAL_TRANSMISSION_SIG", "QUJD" * 200),  # longer than PayPal's 500
        ("HTTP_PAYPAL_CERT_URL", "ftp://api.paypal.com/v1/notifications/certs/CERT-1"),
        ("HTTP_PAYPAL_CERT_URL", "https://api-m.paypal.example/v1/notifications/certs/C"),
        ("HTTP_PAYPAL_AUTH_ALGO", "SHA1withRSA"),
    ],
)
def test_junk_headers_are_refused_without_asking_paypal(
    site, paypal, paypal_account, paypal_order, header, value
):
    _order, capture = paypal_order()
    raw = json.dumps(refund_event(paypal, capture, value="5.00"), separators=(",", ":")).encode()
    response = _post(site, raw, **{**_signed_headers(paypal, raw), header: value})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"event_type":"PAYMENT.CAPTURE.REFUNDED"}',
        b'{"id":"WH-1","event_type":7}',
        b'{"id":"  ","event_type":"PAYMENT.CAPTURE.REFUNDED"}',
        b'"WH-1"',
        b"null",
    ],
)
def test_a_body_that_is_not_a_paypal_event_is_refused_without_asking_paypal(
    site, paypal, paypal_account, body
):
    response = _post(site, body, **_signed_headers(paypal, body))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_refused"
    assert paypal.verifications == [] and not WebhookEvent.objects.exists()


def test_a_retry_days_after_the_first_transmission_is_still_verified(
    site, paypal, paypal_account, paypal_order, run
):
    """PayPal retries a delivery it had no 2xx for over three days, and keeps the first
    transmission's id and time: the freshness window must let its retries through."""
    _order, capture = paypal_order()
    raw = json.dumps(refund_event(paypal, capture, value="5.00"), separators=(",", ":")).encode()
    sent = datetime.now(UTC) - timedelta(days=2, hours=20)
    response = _post(site, raw, **_signed_headers(paypal, raw, when=_iso(sent)))
    assert response.status_code == 200 and response.json()["duplicate"] is False
    assert len(paypal.verifications) == 1 and WebhookEvent.objects.count() == 1


def test_a_replayed_transmission_id_is_a_duplicate_without_asking_paypal_again(
    site, paypal, paypal_account, paypal_order
):
    """A transmission PayPal verified, sent again with another event id (which the stored
    event ids cannot catch), is answered as the duplicate it is: PayPal is not asked twice."""
    _order, capture = paypal_order()
    event = refund_event(paypal, capture, value="5.00")
    raw = json.dumps(event, separators=(",", ":")).encode()
    headers = _signed_headers(paypal, raw)
    assert _post(site, raw, **headers).json() == {"received": True, "duplicate": False}
    again = json.dumps({**event, "id": "WH-REPLAYED"}, separators=(",", ":")).encode()
    replayed = _post(site, again, address="198.51.100.9", **headers)
    assert replayed.status_code == 200
    assert replayed.json() == {"received": True, "duplicate": True}
    assert len(paypal.verifications) == 1 and WebhookEvent.objects.count() == 1


def test_one_address_past_its_share_leaves_the_site_able_to_verify_paypals_deliveries(
    site, paypal, paypal_account, paypal_order, settings
):
    """Junk from one address spends at most that address's share of the site's budget:
    past it the address is answered 429 (Retry-After) and PayPal is not asked, so a genuine
    delivery from another address is still verified."""
    settings.SILL_API_RATES = {
        **settings.SILL_API_RATES,
        "paypal_verify": "3/minute",
        "paypal_verify_address": "2/minute",
    }
    _order, capture = paypal_order()
    attacker = "203.0.113.66"
    for n in range(2):
        raw = json.dumps({"id": f"WH-JUNK-{n}", "event_type": "X"}).encode()
        forged = {**_signed_headers(paypal, raw), "HTTP_PAYPAL_TRANSMISSION_SIG": "QUJD"}
        assert _post(site, raw, address=attacker, **forged).status_code == 400
    raw = json.dumps({"id": "WH-JUNK-2", "event_type": "X"}).encode()
    forged = {**_signed_headers(paypal, raw), "HTTP_PAYPAL_TRANSMISSION_SIG": "QUJD"}
    refused = _post(site, raw, address=attacker, **forged)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limited"
    assert len(paypal.verifications) == 2

    raw = json.dumps(refund_event(paypal, capture, value="5.00"), separators=(",", ":")).encode()
    genuine = _post(site, raw, address="173.0.82.126", **_signed_headers(paypal, raw))
    assert genuine.status_code == 200 and genuine.json()["duplicate"] is False
    assert len(paypal.verifications) == 3 and WebhookEvent.objects.count() == 1


def test_deliveries_paypal_verified_do_not_use_up_their_addresss_share(
    site, paypal, paypal_account, paypal_order, settings
):
    """PayPal delivers from a few addresses of its own: what it signed is given back to the
    address's share (the site's budget still counts it), so the share bounds only junk."""
    settings.SILL_API_RATES = {**settings.SILL_API_RATES, "paypal_verify_address": "2/minute"}
    _order, capture = paypal_order()
    for _ in range(4):
        event = refund_event(paypal, capture, value="1.00")
        raw = json.dumps(event, separators=(",", ":")).encode()
        assert _post(site, raw, **_signed_headers(paypal, raw)).status_code == 200
    assert len(paypal.verifications) == 4 and WebhookEvent.objects.count() == 4


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("refund", {"links": 5}),
        ("refund", {"links": True}),
        ("dispute", {"disputed_transactions": 5}),
    ],
    ids=["links-number", "links-true", "transactions-number"],
)
def test_a_verified_event_of_the_wrong_shapes_is_settled_not_retried(
    site, paypal, paypal_account, paypal_order, run, kind, change
):
    # PayPal signs only a CRC32 of the body; these raised TypeError on every attempt until
    # the retries gave up.
    _order, capture = paypal_order()
    if kind == "refund":
        event = refund_event(paypal, capture, value="5.00")
    else:
        event = dispute_event(paypal, capture)
    event["resource"].update(change)
    assert run(site, paypal, event).status_code == 200
    stored = WebhookEvent.objects.get(site=site, rail="paypal")
    assert stored.processed_at is not None and "not a capture Sill knows" in stored.outcome
    assert stored.last_error == ""
    assert not ExternalRefund.objects.exists() and not Dispute.objects.exists()


def _with_crc32(body: bytes, *, at: int, width: int, crc: int) -> bytes:
    """``body`` with the ``width`` bytes at ``at`` rewritten, to characters from "`" to "o"
    (which JSON keeps as they are), so that its CRC32 is ``crc``: what anyone can do to a body
    PayPal signs only the CRC32 of. CRC32 is affine in the bytes, so the bit flips that make
    up the difference are found by elimination over GF(2)."""
    base = bytearray(body)
    base[at : at + width] = b"`" * width
    start = zlib.crc32(base)
    # Each flip of one of the low four bits of a rewritten byte, and what it does to the CRC.
    flips = [(i, 1 << bit) for i in range(at, at + width) for bit in range(4)]
    effects = []
    for i, mask in flips:
        flipped = bytearray(base)
        flipped[i] ^= mask
        effects.append(zlib.crc32(flipped) ^ start)
    pivots: dict[int, tuple[int, int]] = {}  # top bit → (effect, the flips making it up)
    for n, effect in enumerate(effects):
        chosen = 1 << n
        while effect:
            top = effect.bit_length() - 1
            if top not in pivots:
                pivots[top] = (effect, chosen)
                break
            effect, chosen = effect ^ pivots[top][0], chosen ^ pivots[top][1]
    wanted, chosen = start ^ crc, 0
    while wanted:
        effect, flips_of = pivots[wanted.bit_length() - 1]
        wanted, chosen = wanted ^ effect, chosen ^ flips_of
    for n, (i, mask) in enumerate(flips):
        if chosen >> n & 1:
            base[i] ^= mask
    assert zlib.crc32(base) == crc
    return bytes(base)


def test_a_replay_after_the_cache_forgot_its_transmission_changes_nothing(
    site, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    """Verified transmissions are remembered in the cache (Redis), which a flush or an
    eviction empties. A replay within PayPal's four days is then either the same body, whose
    event id the database holds (a duplicate: PayPal is not asked), or the same transmission
    with another event id and the CRC32 PayPal signs put back. PayPal verifies that again and
    it is stored as a new event, but it changes nothing: the body is never taken as fact, and
    the refund it names, read again at PayPal, is the one already recorded."""
    from django.core.cache import cache

    order, capture = paypal_order(total="89.00")
    event = refund_event(paypal, capture, value="30.00")
    raw = json.dumps(event, separators=(",", ":")).encode()
    headers = _signed_headers(paypal, raw)
    with django_capture_on_commit_callbacks(execute=True):
        assert _post(site, raw, **headers).json() == {"received": True, "duplicate": False}
    cache.clear()

    with django_capture_on_commit_callbacks(execute=True) as enqueued:
        again = _post(site, raw, **headers)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert enqueued == [] and len(paypal.verifications) == 1

    padded = {**event, "id": "WH-REPLAYED", "summary": event["summary"] + " " + "`" * 10}
    forged = json.dumps(padded, separators=(",", ":")).encode()
    forged = _with_crc32(forged, at=forged.index(b"`" * 10), width=10, crc=zlib.crc32(raw))
    cache.clear()
    with django_capture_on_commit_callbacks(execute=True):
        replayed = _post(site, forged, **headers)
    assert replayed.status_code == 200 and replayed.json()["duplicate"] is False
    assert len(paypal.verifications) == 2  # PayPal's verdict: SUCCESS, the CRC32 matches
    first, second = WebhookEvent.objects.filter(site=site, rail="paypal").order_by("pk")
    assert second.event_id == "WH-REPLAYED" and second.processed_at is not None
    refund_id = event["resource"]["id"]
    assert (first.outcome, second.outcome) == (
        f"{refund_id}: external refund recorded",
        f"{refund_id}: unchanged",
    )
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert (outside.amount_minor, outside.counted_minor) == (3000, 3000)
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 3000


def test_a_capture_paypal_reverses_after_a_refund_counts_both_and_leaves_nothing_refundable(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    """PayPal reverses a capture itself (``PAYMENT.CAPTURE.REVERSED``: its resource is a
    refund of the capture, as for ``REFUNDED``). It was stored and ignored ("not an event
    Sill records"): the buyer had the money back, and Sill still offered it as refundable."""
    order, capture = paypal_order(total="89.00")
    assert run(site, paypal, refund_event(paypal, capture, value="30.00")).status_code == 200
    reversal = refund_event(paypal, capture, value="59.00", refund_id="RVSD59CAPTURE")
    reversal |= {
        "event_type": "PAYMENT.CAPTURE.REVERSED",
        "summary": "A $ 59.00 USD capture payment was reversed",
    }
    assert run(site, paypal, reversal).status_code == 200

    stored = WebhookEvent.objects.get(event_id=reversal["id"])
    assert "external refund recorded" in stored.outcome, stored.outcome
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_outside_minor, charge.remaining.amount_minor) == (8900, 0)
    reversed_row = ExternalRefund.objects.get(charge=charge, provider_refund_id="RVSD59CAPTURE")
    assert (reversed_row.counted_minor, reversed_row.status) == (5900, "succeeded")
    assert ExternalRefund.objects.filter(charge=charge).count() == 2
    assert AuditRecord.objects.filter(kind="external_refund").count() == 2
    with pytest.raises(SillError) as refused:
        _refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="amount",
            amount=Money(100, "USD"),
        )
    assert paypal.refund_calls == [], refused.value.code


def test_a_settled_refund_paypal_reports_failed_afterwards_is_reversed(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    """A refund Sill settled that PayPal later holds as FAILED (an eCheck refund that did not
    clear, say): refundable again, shown failed, a signed record, owners and admins told."""
    order, capture = paypal_order()
    refund = _refund(
        site,
        members,
        order,
        django_capture_on_commit_callbacks,
        kind="amount",
        amount=Money(1000, "USD"),
    )
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    made = capture.refunds[0]
    made["status"] = "FAILED"
    mail.outbox.clear()
    failed = refund_event(paypal, capture, value="10.00", custom_id=refund.pk, refund_id=made["id"])
    failed["resource"]["status"] = "FAILED"
    assert run(site, paypal, failed).status_code == 200

    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (0, 0)
    assert AuditRecord.objects.filter(kind="refund_reversed").count() == 1
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    assert not ExternalRefund.objects.exists()


def test_a_dispute_resolved_with_an_outcome_sill_has_no_word_for_is_recorded_once(
    site, paypal, paypal_account, paypal_order, run
):
    # Seen before: "RESOLVED:<outcome>" longer than the 40 characters Sill keeps of the rail's
    # word (an outcome code PayPal adds later) failed to write on every attempt, until the
    # retries gave up: the dispute was never recorded.
    order, capture = paypal_order()
    outcome = "RESOLVED_IN_A_WAY_PAYPAL_ADDED_AFTER_SILL_WAS_WRITTEN"
    resolved = dispute_event(paypal, capture, kind="RESOLVED", status="RESOLVED", outcome=outcome)
    assert run(site, paypal, resolved).status_code == 200
    stored = WebhookEvent.objects.get(site=site, rail="paypal")
    assert stored.last_error == "" and stored.outcome.endswith("dispute recorded")
    dispute = Dispute.objects.get(charge__order=order)
    # Resolved with an outcome Sill has no word for: over, and the buyer may have been paid.
    assert (dispute.status, dispute.rail_status) == ("lost", f"RESOLVED:{outcome}"[:40])
    again = dispute_event(paypal, capture, kind="RESOLVED", status="RESOLVED", outcome=outcome)
    assert run(site, paypal, again).status_code == 200
    assert AuditRecord.objects.filter(kind="dispute").count() == 1  # unchanged, not again
