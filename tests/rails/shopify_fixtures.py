"""Shopify fixtures: the loopback store (tests/rails/shopify_stub.py) and a site connected to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sill.rails.models import RailAccount
from sill.rails.webhook_common import base64_hmac as sign
from tests.rails.shopify_stub import SHOP, TOKEN, ShopifyStub, StubServer

WEBHOOK_SECRET = "shpss_0123456789abcdef0123456789abcdef"


@pytest.fixture
def shopify() -> Iterator[ShopifyStub]:
    with StubServer() as stub:
        yield stub


@pytest.fixture
def shopify_account(site, shopify: ShopifyStub, settings) -> RailAccount:
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 5
    account = RailAccount(
        site=site, rail="shopify", connected_account=SHOP, api_base=shopify.url, enabled=True
    )
    account.set_secret(TOKEN)
    account.set_webhook_secrets([WEBHOOK_SECRET])
    account.save()
    return account


def signed_headers(body: bytes, *, topic: str, webhook_id: str, secret: str = WEBHOOK_SECRET):
    return {
        "HTTP_X_SHOPIFY_HMAC_SHA256": sign(body, secret),
        "HTTP_X_SHOPIFY_TOPIC": topic,
        "HTTP_X_SHOPIFY_WEBHOOK_ID": webhook_id,
        "HTTP_X_SHOPIFY_SHOP_DOMAIN": SHOP,
        "HTTP_X_SHOPIFY_API_VERSION": "2026-04",
    }
