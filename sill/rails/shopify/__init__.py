"""The Shopify rail (see rail.py), plugged into the registry by ``rail_from_account``.

The account's ``connected_account`` holds the shop domain (``example.myshopify.com``), its
secret the Admin API access token (``shpat_…``), its webhook secrets the app's client secret
that signs webhooks, and ``config["scopes"]`` the token's scopes as last checked.
"""

from __future__ import annotations

from django.conf import settings

from sill.rails.base import Rail
from sill.rails.models import RailAccount


def rail_from_account(account: RailAccount) -> Rail:
    from sill.rails.registry import RailDisabled
    from sill.rails.shopify.client import ShopifyClient
    from sill.rails.shopify.rail import ShopifyRail

    token = account.get_secret()
    if not token or not account.connected_account:
        raise RailDisabled("The Shopify rail has no store or token: connect one on the rails page.")
    client = ShopifyClient(
        shop_domain=account.connected_account,
        token=token,
        api_base=account.api_base,
        timeout=float(getattr(settings, "SILL_SHOPIFY_TIMEOUT_SECONDS", 20)),
    )
    # Read at every build: rails are built for each attempt, so the check is per request.
    return ShopifyRail(
        client=client,
        allow_live=bool(settings.SILL_ALLOW_LIVE),
        fact_timeout=float(settings.SILL_RAIL_FACT_TIMEOUT_SECONDS),
        sync_throttle_seconds=float(getattr(settings, "SILL_SHOPIFY_SYNC_THROTTLE_SECONDS", 300)),
    )
