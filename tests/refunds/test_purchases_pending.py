"""A payment the rail has not finished (Stripe ``requires_action`` or ``processing``) is no
failure: the charge stays pending and is asked about again, a bounded number of times."""

from __future__ import annotations

import io
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
import stripe
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from refunds.agent.answers import purchase_payload
from refunds.models import Mandate
from sill.money import Money
from sill.orders.charging import ChargeRetry, charge_order
from sill.orders.models import Charge, Order
from sill.orders.tasks import recover_stuck_charges
from sill.rails.base import ChargePending, ChargeRequest
from sill.rails.models import RailAccount
from sill.rails.stripe import StripeRail
from tests.rails.loopback import serving
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db

KEY = "sk_test_sill_localstripe_pending"


def stripe_account(site, api_base: str) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", api_base=api_base)
    account.set_secret(KEY)
    account.save()
    return account


def place(sign, django_capture_on_commit_callbacks, payment_method: str) -> Order:
    intent = purchase_intent(payment={"rail": "stripe", "payment_method": payment_method})
    with django_capture_on_commit_callbacks(execute=False):
        response = post(Client(), sign(intent))
    assert response.status_code == 201, response.json()
    return Order.objects.get(pk=response.json()["order_id"])


def run_attempts(order: Order, limit: int = 20) -> list[str]:
    """The charge task's attempts, as the worker runs them (Celery retries in between)."""
    outcomes = []
    for _ in range(limit):
        try:
            outcomes.append(charge_order(order_id=order.pk))
            return outcomes
        except ChargeRetry:
            outcomes.append("retry")
    return outcomes


def test_requires_action_stays_pending_then_needs_attention_then_settles(
    site, sign, localstripe_url, settings, django_capture_on_commit_callbacks
):
    settings.SILL_CHARGE_MAX_ATTEMPTS = 3
    settings.SILL_CHARGE_ATTENTION_RECHECK_SECONDS = 0
    settings.SILL_RECOVER_AFTER_SECONDS = 0
    stripe_account(site, localstripe_url)
    client = stripe.StripeClient(KEY, base_addresses={"api": localstripe_url})
    card = {"number": "4000002760003184", "exp_month": 12, "exp_year": 2034, "cvc": "123"}
    method = client.v1.payment_methods.create(params={"type": "card", "card": card})
    order = place(sign, django_capture_on_commit_callbacks, method.id)

    assert run_attempts(order) == ["retry", "retry", "needs_attention"]

    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    # The buyer may still pay (3-D Secure): pending, never failed, the order not cancelled.
    assert (order.status, charge.status, charge.failure_message) == ("PENDING", "pending", "")
    assert charge.needs_attention and charge.rail_status == "requires_action"
    intents = list(client.v1.payment_intents.list(params={"limit": 100}).auto_paging_iter())
    assert [i.id for i in intents] == [charge.provider_payment_id]  # looked up, not recharged
    (flag,) = AuditRecord.objects.filter(site=site, kind="needs_attention")
    assert json.loads(flag.payload)["body"]["provider_payment_id"] == charge.provider_payment_id
    mandate = Mandate.objects.get(mandate_id=order.source_mandate_id)
    answer = purchase_payload(mandate, order)  # what the agent reads: still processing
    assert (answer["status"], answer["reason"]) == ("processing", None)

    # Asked again while the buyer has not acted: still pending, no second record.
    assert recover_stuck_charges() == 1
    assert Charge.objects.get(pk=charge.pk).status == "pending"
    assert AuditRecord.objects.filter(kind="needs_attention").count() == 1

    # The buyer completes 3-D Secure; the sweep's lookup finds the payment and settles it.
    authenticate = urllib.request.Request(
        f"{localstripe_url}/v1/payment_intents/{intents[0].id}/_authenticate",
        data=urllib.parse.urlencode(
            {"client_secret": intents[0].client_secret, "success": "true"}
        ).encode(),
        headers={"Authorization": f"Bearer {KEY}"},
        method="POST",
    )
    urllib.request.urlopen(authenticate, timeout=10).read()
    assert recover_stuck_charges() == 1

    order.refresh_from_db()
    charge.refresh_from_db()
    assert (order.status, charge.status) == ("PAID", "succeeded")
    assert charge.provider_charge_id.startswith("ch_")
    kinds = list(
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("kind", flat=True)
    )
    assert kinds == ["approved", "needs_attention", "charge"]
    call_command("audit", "verify", stdout=io.StringIO())


@pytest.fixture
def processing_stripe() -> Iterator[str]:
    """A loopback Stripe that leaves every PaymentIntent ``processing`` (as a bank debit does;
    localstripe completes those at once). Search answers with the intents made so far."""
    intents: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, payload: dict[str, object]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(
                self.rfile.read(int(self.headers["Content-Length"])).decode()
            )
            intent = {
                "id": f"pi_processing_{len(intents) + 1}",
                "object": "payment_intent",
                "amount": int(form["amount"][0]),
                "currency": form["currency"][0],
                "status": "processing",
                "created": 1764583200,
                "latest_charge": None,
                "customer": None,
                "metadata": {"sill_order_id": form["metadata[sill_order_id]"][0]},
            }
            intents.append(intent)
            self._send(intent)

        def do_GET(self) -> None:
            assert self.path.startswith("/v1/payment_intents/search")
            self._send({"object": "search_result", "data": intents, "has_more": False, "url": "/x"})

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


def test_the_stripe_rail_reports_processing_as_pending_on_charge_and_lookup(processing_stripe):
    rail = StripeRail(secret_key=KEY, api_base=processing_stripe)
    request = ChargeRequest(
        order_id="ord_1",
        amount=Money(8900, "USD"),
        payment_method="pm_card_visa",
        idempotency_key="sill-charge-ord_1",
    )
    with pytest.raises(ChargePending) as charged:
        rail.charge(request)
    assert (charged.value.provider_status, charged.value.provider_payment_id) == (
        "processing",
        "pi_processing_1",
    )
    assert charged.value.retryable
    with pytest.raises(ChargePending):
        rail.find_charge(request)


def test_processing_is_never_failed_when_the_attempts_run_out(
    site, sign, processing_stripe, settings, django_capture_on_commit_callbacks
):
    settings.SILL_CHARGE_MAX_ATTEMPTS = 2
    stripe_account(site, processing_stripe)
    order = place(sign, django_capture_on_commit_callbacks, "pm_card_visa")

    assert run_attempts(order) == ["retry", "needs_attention"]

    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    assert (order.status, charge.status) == ("PENDING", "pending")
    assert charge.needs_attention and charge.rail_status == "processing"
    assert charge.provider_payment_id == "pi_processing_1"
    call_command("audit", "verify", stdout=io.StringIO())
