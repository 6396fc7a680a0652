"""PayPal fixtures: the loopback PayPal (tests/rails/paypal_stub.py) and a site connected to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sill.orders.models import Charge, Order
from sill.rails.models import RailAccount
from sill.rails.paypal.client import TOKENS
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET, WEBHOOK_ID, PayPalStub, StubServer


@pytest.fixture
def paypal() -> Iterator[PayPalStub]:
    TOKENS.clear()
    with StubServer() as stub:
        yield stub
    TOKENS.clear()


@pytest.fixture
def paypal_account(site, paypal: PayPalStub, settings) -> RailAccount:
    settings.SILL_PAYPAL_TIMEOUT_SECONDS = 1
    account = RailAccount(
        site=site,
        rail="paypal",
        api_base=paypal.url,
        enabled=True,
        config={"client_id": CLIENT_ID, "webhook_id": WEBHOOK_ID},
    )
    account.set_secret(CLIENT_SECRET)
    account.save()
    return account


@pytest.fixture
def paypal_order(make_order, paypal: PayPalStub):
    """``paypal_order(days_ago=3, total="89.00")`` → (Sill order, the stub's capture)."""

    def make(*, total: str = "89.00", currency: str = "USD", days_ago: int = 3):
        capture = paypal.add_capture(amount=total, currency=currency, days_ago=days_ago)
        order: Order = make_order(total=total, currency=currency, rail="paypal", days_ago=days_ago)
        Charge.objects.filter(order=order).update(
            provider_charge_id=capture.id, provider_payment_id=capture.order_id
        )
        return order, capture

    return make
