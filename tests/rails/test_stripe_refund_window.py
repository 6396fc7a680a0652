"""Stripe's own refund time limit (``charge_expired_for_refund``) is said in words, with
``refund_window_passed``: through the real stripe SDK against a loopback server that answers
the refund call as Stripe does for a charge too old to refund (localstripe cannot)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sill.money import Money
from sill.rails.base import RefundRequest, RefundWindowPassed
from sill.rails.stripe import StripeRail

KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretXYZ9"


class _TooOld(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {
                "error": {
                    "code": "charge_expired_for_refund",
                    "doc_url": "https://stripe.com/docs/error-codes/charge-expired-for-refund",
                    "message": "This charge is too old to be refunded.",
                    "type": "invalid_request_error",
                }
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def too_old_stripe():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TooOld)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_it_says_stripes_time_limit_passed_instead_of_a_decline(too_old_stripe):
    rail = StripeRail(secret_key=KEY, api_base=too_old_stripe)
    request = RefundRequest(
        refund_id="rfd_OLD",
        idempotency_key="sill-refund-rfd_OLD",
        amount=Money(8900, "USD"),
        provider_charge_id="ch_old",
    )
    with pytest.raises(RefundWindowPassed) as refused:
        rail.refund(request)
    assert refused.value.code == "refund_window_passed"
    assert "older than Stripe's refund time limit" in refused.value.message
    assert KEY not in refused.value.message
