"""Stripe's 429: retried, and never sooner than a ``Retry-After`` it sends says.

Stripe documents no ``Retry-After`` on its 429s (its advice is a backoff), but stripe-python
keeps the answer's headers on the error (``StripeError.headers``), so a wait that Stripe, or
a proxy in front of it, does state is read with the same parser as PayPal's, WooCommerce's
and Shopify's. Through the real SDK against a loopback server answering as Stripe's rate
limiter does (localstripe never limits).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sill.money import Money
from sill.rails.base import RefundRequest, RetryableRailError
from sill.rails.stripe import StripeRail
from tests.rails.loopback import start_serving

KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretRATE"


class _Limited(BaseHTTPRequestHandler):
    url = ""
    retry_after = ""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {
                "error": {
                    "code": "rate_limit",
                    "doc_url": "https://stripe.com/docs/error-codes/rate-limit",
                    "message": "Request rate limit exceeded. Try again later.",
                    "type": "invalid_request_error",
                }
            }
        ).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Stripe-Should-Retry", "true")
        if self.retry_after:
            self.send_header("Retry-After", self.retry_after)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def limited_stripe() -> Iterator[type[_Limited]]:
    class Handler(_Limited):  # this server's own: its wait is set per test
        pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    start_serving(server)
    Handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield Handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("header", "waits"), [("30", 30.0), ("", None), ("later", None), ("86400", 3600.0)]
)
def test_a_rate_limited_refund_is_retryable_and_says_how_long_stripe_asked_to_wait(
    limited_stripe, header, waits
):
    limited_stripe.retry_after = header
    rail = StripeRail(secret_key=KEY, api_base=limited_stripe.url)
    request = RefundRequest(
        refund_id="rfd_RATE",
        idempotency_key="sill-refund-rfd_RATE",
        amount=Money(8900, "USD"),
        provider_charge_id="ch_rate",
    )
    with pytest.raises(RetryableRailError) as refused:
        rail.refund(request)
    assert refused.value.code == "rail_unavailable" and not refused.value.ambiguous
    assert refused.value.retry_after == waits
    assert KEY not in refused.value.message
