"""WooCommerce fixtures: the loopback store (tests/rails/woo_stub.py) and a site connected to it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sill.rails.models import RailAccount
from sill.rails.webhook_common import base64_hmac as sign
from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, StubServer, WooStub

WEBHOOK_SECRET = "woo-webhook-secret-0123456789"


@pytest.fixture
def woo() -> Iterator[WooStub]:
    with StubServer() as stub:
        yield stub


@pytest.fixture
def woo_account(site, woo: WooStub, settings) -> RailAccount:
    settings.SILL_WOOCOMMERCE_TIMEOUT_SECONDS = 5
    account = RailAccount(site=site, rail="woocommerce", connected_account=woo.url, enabled=True)
    account.set_secret(
        json.dumps({"consumer_key": CONSUMER_KEY, "consumer_secret": CONSUMER_SECRET})
    )
    account.set_webhook_secrets([WEBHOOK_SECRET])
    account.save()
    return account


def woo_headers(
    body: bytes, *, url: str, topic: str = "order.updated", secret: str = WEBHOOK_SECRET
):
    return {
        "HTTP_X_WC_WEBHOOK_SIGNATURE": sign(body, secret),
        "HTTP_X_WC_WEBHOOK_TOPIC": topic,
        "HTTP_X_WC_WEBHOOK_RESOURCE": "order",
        "HTTP_X_WC_WEBHOOK_EVENT": topic.split(".")[1],
        "HTTP_X_WC_WEBHOOK_SOURCE": url + "/",
        "HTTP_X_WC_WEBHOOK_ID": "12",
        "HTTP_X_WC_WEBHOOK_DELIVERY_ID": "d41d8cd98f00b204e9800998ecf8427e",
    }
