"""The PayPal rail (see rail.py), plugged into the registry by ``rail_from_account``.

The account's secret is the REST app's client secret; ``config["client_id"]`` its client id
and ``config["webhook_id"]`` the id PayPal gave the webhook (needed to verify deliveries).
Test mode talks to ``api-m.sandbox.paypal.com``, live mode to ``api-m.paypal.com`` and only
with ``SILL_ALLOW_LIVE``; ``api_base`` overrides both (a loopback stub in tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

from sill.rails.base import Rail
from sill.rails.models import RailAccount, RailMode

if TYPE_CHECKING:
    from sill.rails.paypal.client import PayPalClient
    from sill.rails.paypal.rail import PayPalRail


def api_base_for(account: RailAccount) -> str:
    from sill.rails.paypal.client import LIVE_API, SANDBOX_API

    if account.api_base:
        return account.api_base
    return LIVE_API if account.mode == RailMode.LIVE else SANDBOX_API


def rail_from_account(account: RailAccount) -> Rail:
    from sill.rails.paypal.rail import PayPalRail
    from sill.rails.registry import RailDisabled

    if account.mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
        raise RailDisabled(
            "The PayPal rail is in live mode, and live money is switched off on this deployment "
            "(whoever runs Sill can allow it with SILL_ALLOW_LIVE=1)."
        )
    client = client_for(account)
    if not client.has_credentials():
        raise RailDisabled(
            "The PayPal rail has no client id and secret: connect PayPal on Settings → Rails."
        )
    return PayPalRail(
        client=client,
        mode=account.mode,
        fact_timeout=float(settings.SILL_RAIL_FACT_TIMEOUT_SECONDS),
        site_id=account.site_id,
    )


def reader_for(account: RailAccount) -> PayPalRail:
    """The account's PayPal rail for reading what PayPal holds (the processing of its
    webhooks, which PayPal verified with the same credentials): built whatever the account's
    mode, since it moves no money; ``RailDisabled`` without a client id and secret."""
    from sill.rails.paypal.rail import PayPalRail
    from sill.rails.registry import RailDisabled

    client = client_for(account)
    if not client.has_credentials():
        raise RailDisabled(
            "The PayPal rail has no client id and secret: connect PayPal on Settings → Rails."
        )
    return PayPalRail(client=client, mode=account.mode, site_id=account.site_id)


def client_for(account: RailAccount) -> PayPalClient:
    """A client with the account's credentials (raises ``RailSecretUnreadable`` when its
    secret cannot be decrypted)."""
    from sill.rails.paypal.client import PayPalClient

    return PayPalClient(
        client_id=str((account.config or {}).get("client_id") or ""),
        client_secret=account.get_secret(),
        api_base=api_base_for(account),
        timeout=float(getattr(settings, "SILL_PAYPAL_TIMEOUT_SECONDS", 20)),
    )
