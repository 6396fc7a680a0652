"""A purchase is only placed in a currency its rail charges: Stripe takes its documented
presentment currencies (``sill.rails.base.STRIPE_CURRENCIES``), the mock rail every currency
Sill knows. Any other is ``invalid_field`` at intake, before any order exists, and the Stripe
rail sends no charge in it. Against localstripe, which would have charged anything.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import stripe

from refunds.models import Mandate
from sill.accounts.models import Site
from sill.money import KNOWN_CURRENCIES, Money
from sill.orders.models import Charge, Order
from sill.rails.base import ChargeRequest, CurrencyNotCharged, charges_currency
from sill.rails.registry import ensure_mock_rail
from sill.rails.stripe import StripeRail
from tests.rails.localstripe_fixtures import KEY
from tests.rails.stripe_events import stripe_account
from tests.refunds.conftest import purchase_intent

pytestmark = pytest.mark.django_db

Signer = Callable[..., bytes]
Api = Callable[[bytes], Any]
LINE = {"sku": "IQ-1", "name": "Beans", "quantity": 1, "unit_price": Decimal("25.000")}


def in_iqd(rail: str) -> dict[str, Any]:
    return purchase_intent(
        line_items=[LINE],
        quoted_total=Decimal("25.000"),
        currency="IQD",
        payment={"rail": rail, "payment_method": "pm_card_visa"},
    )


def test_of_the_currencies_sill_knows_stripe_charges_all_but_five() -> None:
    refused = {code for code in KNOWN_CURRENCIES if not charges_currency("stripe", code)}
    assert refused == {"CLF", "IQD", "LYD", "UYI", "UYW"}
    assert all(charges_currency("mock", code) for code in KNOWN_CURRENCIES)


def test_a_purchase_in_a_currency_stripe_does_not_charge_is_refused_and_sends_nothing(
    site: Site, sign: Signer, api: Api, localstripe_url: str, sdk: stripe.StripeClient
) -> None:
    # Seen: an IQD purchase on Stripe was answered "approved, processing", and its charge was
    # sent to Stripe, which takes no IQD: the worker then failed it as charge_failed.
    stripe_account(site, enabled=True, api_base=localstripe_url)
    answer = api(sign(in_iqd("stripe")))
    assert answer.status_code == 422, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "signed.intent.currency")
    assert error["message"].startswith("Stripe does not charge IQD: nothing was placed")
    assert not Order.objects.exists() and not Mandate.objects.exists()
    assert sdk.v1.payment_intents.list().data == []

    # The same purchase in a currency Stripe charges is placed and charged there.
    in_usd = purchase_intent(payment={"rail": "stripe", "payment_method": "pm_card_visa"})
    placed = api(sign(in_usd))
    assert placed.status_code == 201, placed.content
    assert Charge.objects.get(order__site=site).status == "succeeded"
    [intent] = sdk.v1.payment_intents.list().data
    assert (intent.currency, intent.amount) == ("usd", 8900)


def test_the_mock_rail_charges_every_currency_sill_knows(
    site: Site, sign: Signer, api: Api
) -> None:
    ensure_mock_rail(site)
    placed = api(sign(in_iqd("mock")))
    assert placed.status_code == 201, placed.content
    assert (placed.json()["decision"], placed.json()["currency"]) == ("approved", "IQD")
    charge = Charge.objects.get(order__site=site)
    assert (charge.status, charge.amount_minor) == ("succeeded", 25000)


def test_a_purchase_in_a_currency_sill_does_not_know_is_refused_and_stores_nothing(
    site: Site, sign: Signer, api: Api, localstripe_url: str, sdk: stripe.StripeClient
) -> None:
    stripe_account(site, enabled=True, api_base=localstripe_url)
    for rail in ("stripe", "mock"):
        unknown = purchase_intent(
            currency="ZZZ", payment={"rail": rail, "payment_method": "pm_card_visa"}
        )
        answer = api(sign(unknown))
        assert answer.status_code == 422, answer.content
        error = answer.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_field", "signed.intent.currency")
        assert "ZZZ is not a supported currency" in error["message"]
    assert not Order.objects.exists() and not Mandate.objects.exists()
    assert sdk.v1.payment_intents.list().data == []


def test_the_stripe_rail_sends_no_charge_in_a_currency_it_does_not_take() -> None:
    with socket.socket() as sock:  # nothing listens there: a call would be a connection error
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rail = StripeRail(secret_key=KEY, api_base=f"http://127.0.0.1:{port}")
    request = ChargeRequest(
        order_id="ord_iqd",
        amount=Money(25000, "IQD"),
        payment_method="pm_card_visa",
        idempotency_key="sill-charge-ord_iqd",
    )
    with pytest.raises(CurrencyNotCharged, match=r"^Stripe does not charge IQD: ") as sent:
        rail.charge(request)
    assert not sent.value.retryable and not sent.value.ambiguous
