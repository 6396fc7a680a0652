"""Stripe's own refund time limit (``charge_expired_for_refund``) is said in words, with
``refund_window_passed``: through the real stripe SDK against a loopback server that answers
the refund call as Stripe does for a charge too old to refund (localstripe cannot)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sill.money import Money
from sill.rails.base import PermanentRailError, RefundRequest, RefundWindowPassed
from sill.rails.stripe import StripeRail
from tests.rails.loopback import start_serving

KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretXYZ9"


class _Refusing(BaseHTTPRequestHandler):
    """Answers every POST with the Stripe error its server's ``error`` holds."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        error = {**self.server.error, "type": "invalid_request_error"}  # type: ignore[attr-defined]
        body = json.dumps({"error": error}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


TOO_OLD = {
    "code": "charge_expired_for_refund",
    "doc_url": "https://stripe.com/docs/error-codes/charge-expired-for-refund",
    "message": "This charge is too old to be refunded.",
}


@contextlib.contextmanager
def refusing_stripe(error: dict[str, str]) -> Iterator[str]:
    """A loopback "Stripe" answering every refund call with ``error``; yields its address."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    server.error = error  # type: ignore[attr-defined]
    start_serving(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def too_old_stripe():
    with refusing_stripe(TOO_OLD) as url:
        yield url


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


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            {
                "code": "charge_already_refunded",
                "message": "Charge ch_done has already been refunded.",
            },
            "already_refunded",
        ),
        (
            {
                "code": "charge_disputed",
                "message": "Charge ch_done has been charged back; cannot issue a refund.",
            },
            "disputed",
        ),
    ],
)
def test_a_refusal_saying_stripe_holds_a_refund_or_dispute_sill_missed_says_so(error, code):
    """Refunded in Stripe's dashboard (or by a WooCommerce admin through its Stripe gateway)
    since Sill decided, or charged back: the code says the rail's books are ahead, so the
    refund core reads the charge at once (refunds.services.BOOKS_BEHIND_CODES) rather than
    offering the amount again. It was ``rail_declined``, which reads nothing."""
    with refusing_stripe(error) as url:
        rail = StripeRail(secret_key=KEY, api_base=url)
        request = RefundRequest(
            refund_id="rfd_DONE",
            idempotency_key="sill-refund-rfd_DONE",
            amount=Money(8900, "USD"),
            provider_charge_id="ch_done",
        )
        with pytest.raises(PermanentRailError) as refused:
            rail.refund(request)
    assert refused.value.code == code
    assert error["message"] in refused.value.message
