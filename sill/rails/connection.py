"""Settings → Rails' "Test connection": one cheap read per rail with the stored credentials.

:func:`test_connection` builds the rail's client from the site's ``RailAccount`` with a short
timeout (``SILL_RAIL_CHECK_TIMEOUT_SECONDS``, 5 s), makes the rail module's read that moves
nothing (Stripe: the balance and the account; Shopify: the token's scopes and the shop;
WooCommerce: one order; PayPal: a fresh OAuth token; mock: nothing to reach) and answers a
:class:`ConnectionCheck` in words. Secrets are never in the answer or the log: the rail
modules' messages are scrubbed, and this module adds only names it chose.

One answer per site, rail and set of credentials is kept for ``DEBOUNCE_SECONDS``: pressing
the button again at once shows the same answer instead of calling the provider again, and
saving other credentials (or mode, address, account or settings) is checked at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from sill.orders.models import Rail
from sill.rails import registry
from sill.rails.base import ConnectionInfo, RailError
from sill.rails.models import RailAccount, RailMode
from sill.rails.paypal import connect as paypal_connect
from sill.rails.paypal.client import LIVE_API, SANDBOX_API
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.shopify import connect as shopify_connect
from sill.rails.stripe import StripeRail
from sill.rails.woocommerce import connect as woo_connect

logger = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 5


@dataclass(frozen=True)
class ConnectionCheck:
    """``ok``: the read worked (a missing scope is still ok, with ``warning``)."""

    rail: str
    ok: bool
    message: str
    code: str = "connected"
    warning: str = ""


def _timeout() -> float:
    return float(settings.SILL_RAIL_CHECK_TIMEOUT_SECONDS)


def can_test(account: RailAccount | None) -> bool:
    """Whether the card offers the button: the mock rail, or a rail with saved credentials."""
    if account is None:
        return False
    return account.rail == Rail.MOCK or account.has_secret


def test_connection(account: RailAccount) -> ConnectionCheck:
    """Check ``account``'s credentials now (or answer the check made in the last seconds)."""
    key = debounce_key(account)
    cached = cache.get(key)
    if isinstance(cached, ConnectionCheck):
        return cached
    check = _check(account)
    cache.set(key, check, DEBOUNCE_SECONDS)
    logger.info(
        "connection check of the %s rail of site %s: %s", account.rail, account.site_id, check.code
    )
    return check


def debounce_key(account: RailAccount) -> str:
    """The cache key of ``account``'s last answer: the site, the rail and a digest of what the
    answer depends on, so a change to any of it is checked anew. The secret enters only as a
    digest of its ciphertext."""
    state = [
        account.enabled,
        account.mode,
        hashlib.sha256(bytes(account.secret_encrypted)).hexdigest(),
        account.api_base,
        account.connected_account,
        account.config,
    ]
    text = json.dumps(state, sort_keys=True, default=str, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"sill:railcheck:{account.site_id}:{account.rail}:{digest}"


def _check(account: RailAccount) -> ConnectionCheck:
    rail = account.rail
    try:
        info = _read(account)
    except registry.RailDisabled as exc:
        return ConnectionCheck(rail=rail, ok=False, message=exc.message, code="not_usable")
    except RailSecretUnreadable:
        return ConnectionCheck(
            rail=rail,
            ok=False,
            message="Sill cannot decrypt the stored credentials: enter them again.",
            code="not_usable",
        )
    except RailError as exc:
        return ConnectionCheck(rail=rail, ok=False, message=exc.message, code=exc.code)
    return _connected(account, info)


def _connected(account: RailAccount, info: ConnectionInfo) -> ConnectionCheck:
    label = str(Rail(account.rail).label)
    parts = [f"Connected to {info.name}" if info.name else f"Connected to {label}"]
    if info.test_mode is True:
        parts.append("development store" if account.rail == Rail.SHOPIFY else "test mode")
    elif info.test_mode is False:
        parts.append("live")
    warning = ""
    if info.missing_scopes:
        warning = "Missing scope: " + ", ".join(info.missing_scopes) + "."
    return ConnectionCheck(
        rail=account.rail,
        ok=True,
        message=" · ".join(parts),
        code="missing_scope" if warning else "connected",
        warning=warning,
    )


def _read(account: RailAccount) -> ConnectionInfo:
    timeout = _timeout()
    if account.rail == Rail.MOCK:
        return ConnectionInfo(name="Sill's mock rail (no money moves)", test_mode=True)
    if account.rail == Rail.STRIPE:
        registry.rail_from_account(account)  # the same refusals as a refund: no key, mode
        return StripeRail(
            secret_key=account.get_secret(),
            connected_account=account.connected_account,
            api_base=account.api_base,
            mode=account.mode,
            timeout=timeout,
        ).check_connection()
    if account.mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
        registry.rail_from_account(account)  # raises RailDisabled with the words for it
    if account.rail == Rail.SHOPIFY:
        return shopify_connect.check_connection(
            shop=account.connected_account,
            token=account.get_secret(),
            api_base=account.api_base,
            timeout=timeout,
        )
    if account.rail == Rail.WOOCOMMERCE:
        key, secret = woo_connect.woo_credentials(account)
        return woo_connect.check_connection(
            store_url=account.connected_account,
            consumer_key=key,
            consumer_secret=secret,
            timeout=timeout,
        )
    if account.rail == Rail.PAYPAL:
        config = account.config or {}
        return paypal_connect.check_connection(
            client_id=str(config.get("client_id") or ""),
            client_secret=account.get_secret(),
            api_base=account.api_base
            or (LIVE_API if account.mode == RailMode.LIVE else SANDBOX_API),
            mode=account.mode,
            timeout=timeout,
        )
    raise registry.RailDisabled(f"Sill can't check the {account.rail} rail.")
