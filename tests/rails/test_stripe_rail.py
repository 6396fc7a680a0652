"""The Stripe rail against localstripe, through the real SDK."""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import stripe

from sill.money import Money
from sill.rails.base import (
    AmbiguousRailError,
    ChargeRequest,
    ChargeResult,
    PermanentRailError,
    Rail,
    RailError,
    RefundRequest,
)
from sill.rails.stripe import StripeRail
from tests.rails.loopback import start_serving

KEY = "sk_test_51SillSecretKeyThatMustNeverLeak"


@pytest.fixture
def rail(localstripe_url: str) -> StripeRail:
    return StripeRail(secret_key=KEY, api_base=localstripe_url)


def usd(minor: int) -> Money:
    return Money(minor, "USD")


def pay(rail: StripeRail, minor: int = 8900, method: str = "pm_card_visa") -> ChargeResult:
    return rail.charge(
        ChargeRequest(
            order_id="ord_1",
            amount=usd(minor),
            payment_method=method,
            idempotency_key="sill-charge-ord_1",
        )
    )


def refund_request(charge: ChargeResult, minor: int, refund_id: str = "rf_1") -> RefundRequest:
    return RefundRequest(
        refund_id=refund_id,
        idempotency_key=f"sill-refund-{refund_id}",
        amount=usd(minor),
        provider_charge_id=charge.provider_charge_id,
        provider_payment_id=charge.provider_payment_id,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_it_implements_the_protocol(rail):
    assert isinstance(rail, Rail)


def test_it_charges(rail):
    charge = pay(rail)

    assert charge.provider_payment_id.startswith("pi_")
    assert charge.provider_charge_id.startswith("ch_")
    assert rail.charge_amount_refunded(charge.provider_charge_id) == usd(0)


def test_it_refunds_in_full(rail):
    charge = pay(rail, 8900)

    result = rail.refund(refund_request(charge, 8900))

    assert result.provider_refund_id.startswith("re_")
    assert result.state == "succeeded"
    assert result.amount == usd(8900)
    assert rail.charge_amount_refunded(charge.provider_charge_id) == usd(8900)


def test_it_refunds_in_parts(rail):
    charge = pay(rail, 8900)

    first = rail.refund(refund_request(charge, 2000, "rf_1"))
    second = rail.refund(refund_request(charge, 1500, "rf_2"))

    assert first.provider_refund_id != second.provider_refund_id
    assert rail.charge_amount_refunded(charge.provider_charge_id) == usd(3500)


def test_it_refunds_by_payment_intent(rail):
    charge = pay(rail, 8900)
    request = RefundRequest(
        refund_id="rf_1",
        idempotency_key="sill-refund-rf_1",
        amount=usd(100),
        provider_charge_id="",
        provider_payment_id=charge.provider_payment_id,
    )

    assert rail.refund(request).amount == usd(100)
    assert rail.find_refund(request) is not None


def test_it_finds_a_refund_by_its_metadata(rail):
    charge = pay(rail)
    rail.refund(refund_request(charge, 1000, "rf_other"))
    made = rail.refund(refund_request(charge, 2000, "rf_1"))

    found = rail.find_refund(refund_request(charge, 2000, "rf_1"))

    assert found == made
    assert rail.find_refund(refund_request(charge, 2000, "rf_never")) is None


@pytest.fixture
def recording_proxy(localstripe_url: str) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback proxy in front of localstripe that records the headers of each request."""
    seen: list[dict[str, str]] = []

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            seen.append(dict(self.headers))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream = urllib.request.Request(
                localstripe_url + self.path, data=body or None, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(upstream, timeout=10) as response:
                    status, payload = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, payload = error.code, error.read()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    start_serving(server)
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_it_sends_sills_idempotency_key_on_every_post(recording_proxy):
    # localstripe ignores Idempotency-Key, so check what reaches the wire.
    url, seen = recording_proxy
    rail = StripeRail(secret_key=KEY, api_base=url)

    charge = pay(rail)
    rail.refund(refund_request(charge, 100, "rf_1"))
    rail.refund(refund_request(charge, 100, "rf_1"))  # a retry: the same key again

    keys = [headers.get("Idempotency-Key") for headers in seen]
    assert keys == ["sill-charge-ord_1", "sill-refund-rf_1", "sill-refund-rf_1"]


def test_it_sends_the_connected_account(recording_proxy):
    url, seen = recording_proxy
    rail = StripeRail(secret_key=KEY, api_base=url, connected_account="acct_123")

    pay(rail)  # localstripe ignores the header; real Stripe routes the call to the account

    assert seen[0].get("Stripe-Account") == "acct_123"


def test_a_declined_card_is_permanent(rail):
    # localstripe declines pm_card_visa_chargeDeclined only when attaching it to a customer;
    # pm_card_chargeCustomerFail (4000000000000341) is the one it declines when charging.
    with pytest.raises(PermanentRailError) as caught:
        pay(rail, method="pm_card_chargeCustomerFail")

    assert "card_declined" in caught.value.message
    assert not caught.value.retryable


def test_refunding_an_unknown_charge_is_permanent(rail):
    request = RefundRequest(
        refund_id="rf_1",
        idempotency_key="sill-refund-rf_1",
        amount=usd(100),
        provider_charge_id="ch_doesnotexist",
    )

    with pytest.raises(PermanentRailError):
        rail.refund(request)


def test_a_rejected_key_is_permanent_and_not_echoed(localstripe_url, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "xk_test_NotAcceptedByLocalstripe"
    rail = StripeRail(secret_key=secret, api_base=localstripe_url)

    with pytest.raises(PermanentRailError) as caught:
        pay(rail)

    assert secret not in str(caught.value)
    assert secret not in caplog.text


def test_a_charge_leaves_no_client_secret_or_request_line_in_a_debug_log(
    rail, localstripe_url, caplog
):
    # At SILL_LOG_LEVEL=DEBUG stripe wrote each response body, a PaymentIntent's client_secret
    # in it, and urllib3 each request line with its query: both stay at INFO (LOGGING).
    caplog.set_level(logging.DEBUG)
    charge = pay(rail)

    sdk = stripe.StripeClient(KEY, base_addresses={"api": localstripe_url})
    intent = sdk.v1.payment_intents.retrieve(charge.provider_payment_id)
    assert intent.client_secret and intent.client_secret not in caplog.text
    quiet = ("stripe", "urllib3")
    debug = [r for r in caplog.records if r.name.split(".")[0] in quiet and r.levelno < 20]
    assert debug == []


def test_a_lost_connection_is_ambiguous_and_never_shows_the_key(caplog):
    caplog.set_level(logging.DEBUG)
    rail = StripeRail(secret_key=KEY, api_base=f"http://127.0.0.1:{closed_port()}", timeout=2)
    charge = ChargeResult(
        provider_payment_id="pi_1",
        provider_charge_id="ch_1",
        captured_at=datetime.now(UTC),
    )

    with pytest.raises(AmbiguousRailError) as caught:
        rail.refund(refund_request(charge, 100))

    error = caught.value
    assert error.ambiguous and error.retryable
    assert caught.value.__cause__ is None
    assert KEY not in str(error)
    assert KEY not in repr(error)
    assert KEY not in caplog.text
    assert KEY not in repr(rail)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (
            400,
            {
                "type": "idempotency_error",
                "message": "Keys for idempotent requests can only be used with the same "
                "parameters they were first used with.",
            },
        ),
        (
            409,
            {
                "type": "invalid_request_error",
                "message": "There is currently another in-progress request using this "
                "Idempotent Key (that probably means you submitted twice, and the other "
                "request is still going through). Please try again later.",
            },
        ),
    ],
)
def test_stripes_word_about_the_idempotency_key_is_ambiguous_never_a_refusal(status, error):
    """Either answer says an earlier request under the key exists, and Stripe may have
    refunded under it: read as a refusal (the 400), the refund failed and its amount was
    released while the money may have left."""

    class Refuses(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            payload = json.dumps({"error": error}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    start_serving(server)
    try:
        rail = StripeRail(secret_key=KEY, api_base=f"http://127.0.0.1:{server.server_address[1]}")
        charge = ChargeResult(
            provider_payment_id="pi_1", provider_charge_id="ch_1", captured_at=datetime.now(UTC)
        )
        with pytest.raises(AmbiguousRailError) as caught:
            rail.refund(refund_request(charge, 100))
    finally:
        server.shutdown()
        server.server_close()
    assert caught.value.ambiguous and "idempotent" in str(caught.value).lower()


def test_a_lookup_without_connection_is_retryable_not_ambiguous():
    rail = StripeRail(secret_key=KEY, api_base=f"http://127.0.0.1:{closed_port()}", timeout=2)
    request = RefundRequest(
        refund_id="rf_1", idempotency_key="k", amount=usd(1), provider_charge_id="ch_1"
    )

    with pytest.raises(RailError) as caught:
        rail.find_refund(request)

    assert caught.value.retryable and not caught.value.ambiguous


def test_one_key_keeps_one_http_client_alive_and_keys_never_share_one():
    from sill.rails.stripe import http_client_for

    assert http_client_for("sk_test_one", 20.0) is http_client_for("sk_test_one", 20.0)
    assert http_client_for("sk_test_one", 20.0) is not http_client_for("sk_test_two", 20.0)
    assert http_client_for("sk_test_one", 20.0) is not http_client_for("sk_test_one", 5.0)


@pytest.mark.parametrize("currency", ["ISK", "UGX"])
def test_whole_unit_currencies_stripe_keeps_two_decimal_are_sent_and_read_so(
    rail, localstripe_url, currency
):
    # ISK and UGX have no minor unit (ISO 4217), but Stripe's API kept them two-decimal: an
    # amount of 100 is 1 króna or 1 shilling. 5,000 of either is 500000 on the wire, both ways.
    isk = Money(5000, currency)
    request = ChargeRequest(
        order_id=f"ord_{currency}",
        amount=isk,
        payment_method="pm_card_visa",
        idempotency_key=f"sill-charge-ord_{currency}",
    )
    charge = rail.charge(request)

    stripe_side = stripe.StripeClient(KEY, base_addresses={"api": localstripe_url})
    intent = stripe_side.v1.payment_intents.retrieve(charge.provider_payment_id)
    assert (intent.amount, intent.currency) == (500000, currency.lower())
    assert rail.find_charge(request) == charge

    refund = rail.refund(
        RefundRequest(
            refund_id=f"rf_{currency}",
            idempotency_key=f"sill-refund-rf_{currency}",
            amount=Money(1200, currency),
            provider_charge_id=charge.provider_charge_id,
        )
    )
    assert refund.amount == Money(1200, currency)
    assert stripe_side.v1.refunds.retrieve(refund.provider_refund_id).amount == 120000
    assert rail.charge_amount_refunded(charge.provider_charge_id) == Money(1200, currency)
    (listed,) = rail.list_refunds(charge.provider_charge_id)
    assert (listed.amount_minor, listed.currency) == (1200, currency)
