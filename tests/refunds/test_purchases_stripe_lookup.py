"""The Stripe rail finds the PaymentIntent Sill made for an order (localstripe has no search:
the rail falls back to listing), so a lost answer is settled without a second charge."""

from __future__ import annotations

import pytest

from sill.money import Money
from sill.rails.base import ChargeFinder, ChargeRequest, PermanentRailError
from sill.rails.stripe import StripeRail

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
