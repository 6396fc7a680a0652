"""Localstripe fixtures shared by the Stripe rail tests: a charge really made at localstripe,
the SDK pointed at it, the agent API and webhook delivery running what they enqueue."""

from __future__ import annotations

import json
from typing import Any

import pytest
import stripe

from sill.money import parse_major
from sill.orders.models import Charge
from sill.rails.base import ChargeRequest
from sill.rails.stripe import StripeRail
from tests.rails.stripe_events import deliverer, stripe_account
from tests.refunds.conftest import ORIGINAL, api  # noqa: F401 (api: a fixture, re-exported)

KEY = "sk_test_sill_webhooks_0001"


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    return deliverer(django_capture_on_commit_callbacks)


@pytest.fixture
def sdk(localstripe_url: str) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": localstripe_url}, max_network_retries=0)


def charged_at_localstripe(
    site, make_order, agent, localstripe_url: str, *, total: str = "89.00", currency: str = "USD"
) -> Charge:
    """An order of ``total`` the agent placed (under the seed's mandate ``ORIGINAL``), really
    charged at localstripe, its charge naming Stripe's payment and charge ids."""
    stripe_account(site, enabled=True, api_base=localstripe_url)
    order = make_order(
        total=total, currency=currency, rail="stripe", placed_by_agent=agent,
        source_mandate_id=ORIGINAL,
    )  # fmt: skip
    result = StripeRail(secret_key=KEY, api_base=localstripe_url).charge(
        ChargeRequest(
            order_id=order.pk,
            amount=parse_major(total, currency),
            payment_method="pm_card_visa",
            idempotency_key=f"sill-charge-{order.pk}",
        )
    )
    charge = Charge.objects.get(order=order)
    charge.provider_charge_id = result.provider_charge_id
    charge.provider_payment_id = result.provider_payment_id
    charge.save()
    return charge


@pytest.fixture
def paid(site, make_order, agent, localstripe_url) -> Charge:
    """An $89.00 order the agent placed, really charged at localstripe."""
    return charged_at_localstripe(site, make_order, agent, localstripe_url)


def as_dict(obj: stripe.StripeObject) -> dict[str, Any]:
    return json.loads(str(obj))
