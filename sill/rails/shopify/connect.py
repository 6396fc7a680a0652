"""Connecting a Shopify store on Settings → Rails: the shop domain, token and webhook secret.

The Admin API access token (``shpat_…``) and the app's client secret (which signs webhooks)
are write-only: encrypted into the account, never logged, rendered or returned. Saving a
token asks Shopify for its scopes (``GET /admin/oauth/access_scopes.json``, a read that moves
nothing and is the only call this page makes), so the page can say at once which of
``read_orders``, ``write_orders`` and ``read_customers`` the token lacks; a token Shopify
refuses, or a store Sill cannot reach, saves nothing.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from sill.accounts import two_factor
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Site
from sill.orders.models import Rail
from sill.rails.base import ConnectionInfo, PermanentRailError, RailError, RetryableRailError
from sill.rails.models import RailAccount
from sill.rails.services import RailSettingsError, _check_api_base
from sill.rails.shopify import queries
from sill.rails.shopify.client import SHOP_DOMAIN_RE, ShopifyClient

logger = logging.getLogger(__name__)

REQUIRED_SCOPES = ("read_orders", "write_orders", "read_customers")
WHY_SCOPE = {
    "read_orders": "Sill cannot read orders, so it cannot sync or refund them",
    "write_orders": "refunds on Shopify fail",
    "read_customers": "customer age and 90-day history are unknown to your rules",
}
_TOKEN_RE = re.compile(r"^shpat_[A-Za-z0-9]{16,200}$")


def normalize_shop_domain(value: str) -> str:
    text = value.strip().lower()
    text = re.sub(r"^https?://", "", text).split("/")[0]
    return text


def missing_scopes(scopes: list[str]) -> list[str]:
    """The required scopes the token lacks (``write_x`` includes ``read_x``, as on Shopify)."""
    have = set(scopes) | {s.replace("write_", "read_", 1) for s in scopes if s.startswith("write_")}
    return [s for s in REQUIRED_SCOPES if s not in have]


def token_hint(token: str) -> str:
    return f"shpat_…{token[-4:]}" if len(token) > 10 else "shpat_…"


def configure_shopify(
    *,
    site: Site,
    actor: Any,
    shop_domain: str,
    access_token: str,
    webhook_secrets: str = "",
    api_base: str | None = None,
    second_factor: two_factor.Freshness,
) -> tuple[RailAccount, list[str]]:
    """Save the store; returns the account and the required scopes its token lacks.

    An empty ``access_token`` keeps the stored one, unless the shop changes (a token belongs
    to one store). ``api_base`` (DEBUG only, for a loopback server) ``None`` keeps the
    stored value. A new Shopify account starts switched off. A new token or webhook signing
    secret is refused by ``second_factor`` without a fresh code, before Shopify is called.
    """
    # First: a refused caller must not even get the provider called with what it sent.
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    two_factor.check_widening(
        second_factor, widens=bool(access_token.strip()) or bool(webhook_secrets.strip())
    )
    shop = normalize_shop_domain(shop_domain)
    if not SHOP_DOMAIN_RE.match(shop):
        raise RailSettingsError(
            "Enter the store's myshopify.com domain, e.g. northwind.myshopify.com.",
            field="shop_domain",
        )
    token = access_token.strip()
    if token and not _TOKEN_RE.match(token):
        raise RailSettingsError(
            "That is not an Admin API access token: it starts with shpat_ (your custom app's "
            "API credentials in the Shopify admin).",
            field="access_token",
        )
    secrets = [line.strip() for line in webhook_secrets.splitlines() if line.strip()]
    if any(len(line) > 255 or not line.isprintable() for line in secrets):
        raise RailSettingsError(
            "Paste the app's client secret, one per line.", field="webhook_secrets"
        )
    if api_base is not None:
        api_base = _check_api_base(api_base.strip())
    stored = RailAccount.objects.filter(site=site, rail=Rail.SHOPIFY).first()
    if not token:
        if stored is None or not stored.has_secret:
            raise RailSettingsError("Enter the Admin API access token.", field="access_token")
        if stored.connected_account != shop:
            raise RailSettingsError(
                f"Enter the access token of {shop}: the saved one belongs to "
                f"{stored.connected_account}.",
                field="access_token",
            )
    effective_base = api_base if api_base is not None else (stored.api_base if stored else "")
    scopes = _check_scopes(shop, token or (stored.get_secret() if stored else ""), effective_base)
    missing = missing_scopes(scopes)

    with transaction.atomic():
        hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)  # as sill.rails.services says
        account = RailAccount.objects.select_for_update().filter(site=site, rail=Rail.SHOPIFY)
        row = account.first() or RailAccount(site=site, rail=Rail.SHOPIFY, enabled=False)
        if token:
            row.set_secret(token)
        if secrets:
            row.set_webhook_secrets(secrets)
        row.connected_account = shop
        if api_base is not None:
            row.api_base = api_base
        row.config = {
            **(row.config or {}),
            "scopes": scopes,
            "scopes_checked_at": timezone.now().isoformat(),
        }
        row.save()
        append_record(
            site=site,
            kind=AuditKind.RAIL_CHANGE,
            body={
                "rail": Rail.SHOPIFY,
                "shop_domain": shop,
                "new_token": bool(token),
                "new_webhook_secret": bool(secrets),
                "scopes": scopes,
                "missing_scopes": missing,
                "actor": actor.get_username() if actor is not None else "system",
            },
        )
    logger.info(
        "shopify rail configured on site %s for %s (new token %s, missing scopes %s)",
        site.pk,
        shop,
        "yes" if token else "no",
        ",".join(missing) or "none",
    )
    return row, missing


def _check_scopes(shop: str, token: str, api_base: str) -> list[str]:
    client = ShopifyClient(
        shop_domain=shop,
        token=token,
        api_base=api_base,
        timeout=float(getattr(settings, "SILL_SHOPIFY_TIMEOUT_SECONDS", 20)),
    )
    try:
        return client.access_scopes()
    except PermanentRailError:
        raise RailSettingsError(
            f"Shopify refused this access token for {shop}: check that it is the Admin API "
            "token of an installed custom app on that store. Nothing was saved.",
            field="access_token",
        ) from None
    except RailError:
        raise RailSettingsError(
            f"Sill could not reach {shop} to check the token. Nothing was saved; try again.",
            code="rail_unavailable",
            field="shop_domain",
        ) from None


def check_connection(*, shop: str, token: str, api_base: str, timeout: float) -> ConnectionInfo:
    """Settings → Rails' "Test connection": the token's scopes and the shop's name and plan.

    Two reads that move nothing. Raises ``PermanentRailError`` ``bad_key`` (Shopify refused
    the token) or ``RetryableRailError`` ``unreachable``; a token that lacks a scope Sill
    needs is no error: ``missing_scopes`` names it.
    """
    client = ShopifyClient(shop_domain=shop, token=token, api_base=api_base, timeout=timeout)
    try:
        scopes = client.access_scopes()
        result = client.execute(queries.SHOP, operation="SillShop")
    except PermanentRailError as exc:
        if exc.code == "shopify_unauthorized":
            raise PermanentRailError(
                f"Shopify refused the access token for {shop}: the app may be uninstalled or "
                "the token revoked.",
                code="bad_key",
            ) from None
        raise
    except RetryableRailError:
        raise RetryableRailError(
            f"{shop} could not be reached (no answer in time).", code="unreachable"
        ) from None
    data = result.data.get("shop") or {}
    plan = data.get("plan") or {}
    development = plan.get("partnerDevelopment")
    return ConnectionInfo(
        name=str(data.get("name") or shop),
        test_mode=bool(development) if isinstance(development, bool) else None,
        missing_scopes=tuple(missing_scopes(scopes)),
    )
