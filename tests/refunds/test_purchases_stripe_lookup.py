"""The Stripe rail finds the PaymentIntent Sill made for an order (localstripe has no search:
the rail falls back to listing), so a lost answer is settled without a second charge."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from sill.money import Money
from sill.rails.base import ChargeFinder, ChargeRequest, PermanentRailError, RailError
from sill.rails.stripe import StripeRail
from tests.rails.loopback import serving

KEY = "sk_test_sill_localstripe_lookup"


def request(order_id: str, method: str = "pm_card_visa") -> ChargeRequest:
    return ChargeRequest(
        order_id=order_id,
        amount=Money(8900, "USD"),
        payment_method=method,
        idempotency_key=f"sill-charge-{order_id}",
    )


@pytest.fixture
def rail(localstripe_url: str) -> StripeRail:
    return StripeRail(secret_key=KEY, api_base=localstripe_url)


def test_it_finds_the_charge_made_for_the_order_and_nothing_for_another(rail):
    assert isinstance(rail, ChargeFinder)
    rail.charge(request("ord_other"))
    made = rail.charge(request("ord_1"))

    assert rail.find_charge(request("ord_1")) == made
    assert rail.find_charge(request("ord_never")) is None


def test_a_declined_attempt_counts_as_no_charge(rail):
    # pm_card_chargeCustomerFail is declined when charged; the intent stays behind at Stripe
    # in requires_payment_method, having taken no money.
    with pytest.raises(PermanentRailError):
        rail.charge(request("ord_1", "pm_card_chargeCustomerFail"))
    assert rail.find_charge(request("ord_1")) is None


@pytest.fixture
def busy_stripe() -> Iterator[str]:
    """A loopback Stripe without search, whose account has more PaymentIntents (of other
    orders) than the rail lists: every page says there are more."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: dict[str, object]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            if url.path == "/v1/payment_intents/search":
                self._send(404, {"error": {"type": "invalid_request_error", "message": "no"}})
                return
            after = urllib.parse.parse_qs(url.query).get("starting_after", ["pi_0"])[0]
            start = int(after.removeprefix("pi_")) + 1
            intents = [
                {
                    "id": f"pi_{n}",
                    "object": "payment_intent",
                    "amount": 8900,
                    "currency": "usd",
                    "status": "succeeded",
                    "created": 1764583200,
                    "latest_charge": f"ch_{n}",
                    "customer": None,
                    "metadata": {"sill_order_id": f"ord_other_{n}"},
                }
                for n in range(start, start + 100)
            ]
            self._send(200, {"object": "list", "data": intents, "has_more": True, "url": "/x"})

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


def test_a_listing_cut_short_is_no_answer_that_nothing_was_charged(busy_stripe):
    # The order's PaymentIntent may be older than the pages read: "none" would let Sill fail
    # the charge (and cancel the order) while the buyer was charged.
    rail = StripeRail(secret_key=KEY, api_base=busy_stripe)

    with pytest.raises(RailError) as caught:
        rail.find_charge(request("ord_1"))

    assert caught.value.retryable
