"""Connecting a WooCommerce store (Settings → Rails): URL, REST keys, webhook secret.

The URL must be https (a loopback ``http://127.0.0.1`` store is accepted for tests and
development only); the consumer key and secret are write-only and stored encrypted; a new
store starts switched off. Saving checks the keys with one read of the store
(``GET /wp-json/wc/v3/orders?per_page=1``, see ``WooClient.check_access``): keys the store
refuses, a URL with no WooCommerce REST API, or a store Sill cannot reach save nothing. The
change is signed (``rail_change``) in the transaction that saves it, without any secret.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from sill.accounts import two_factor
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.admin_audit import record_admin_change
from sill.accounts.models import Site
from sill.rails.base import (
    ConnectionInfo,
    PermanentRailError,
    RailError,
    RailName,
    RetryableRailError,
)
from sill.rails.models import RailAccount
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.services import RailSettingsError
from sill.rails.woocommerce.client import WooCannotWrite, WooClient

logger = logging.getLogger(__name__)

_KEY_RE = re.compile(r"^ck_[0-9a-f]{40}$")
_SECRET_RE = re.compile(r"^cs_[0-9a-f]{40}$")


def check_store_url(url: str) -> str:
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if parts.scheme == "http" and _loopback(host):
        pass
    elif parts.scheme != "https" or not host or parts.username or parts.password:
        raise RailSettingsError(
            "Enter the store's https address, e.g. https://shop.example.com (WooCommerce sends "
            "the keys with every request, so plain http is refused).",
            field="store_url",
        )
    if parts.query or parts.fragment:
        raise RailSettingsError("Enter the store's address without ?… or #….", field="store_url")
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def woo_credentials(account: RailAccount) -> tuple[str, str]:
    """The stored (consumer key, consumer secret); ``("", "")`` when none."""
    plain = account.get_secret()
    if not plain:
        return "", ""
    data = json.loads(plain)
    return str(data.get("consumer_key") or ""), str(data.get("consumer_secret") or "")


def key_hint(consumer_key: str) -> str:
    return f"{consumer_key[:3]}…{consumer_key[-4:]}" if consumer_key else ""


def configure_woocommerce(
    *,
    site: Site,
    actor: Any,
    store_url: str,
    consumer_key: str,
    consumer_secret: str,
    webhook_secret: str,
    second_factor: two_factor.Freshness,
) -> RailAccount:
    """Save the site's store; empty key, secret or webhook secret keep the stored ones (of
    the same store: another store needs its own). A new key, secret or webhook secret is
    refused by ``second_factor`` without a fresh code, before the store is called."""
    # First: a refused caller must not even get the provider called with what it sent.
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    two_factor.check_widening(
        second_factor,
        widens=any(value.strip() for value in (consumer_key, consumer_secret, webhook_secret)),
    )
    url = check_store_url(store_url)
    consumer_key, consumer_secret = consumer_key.strip(), consumer_secret.strip()
    if bool(consumer_key) != bool(consumer_secret):
        raise RailSettingsError(
            "Enter both the consumer key and the consumer secret.",
            field="consumer_key" if not consumer_key else "consumer_secret",
        )
    if consumer_key and not _KEY_RE.match(consumer_key):
        raise RailSettingsError(
            "A consumer key looks like ck_ and 40 hex characters (WooCommerce → Settings → "
            "Advanced → REST API).",
            field="consumer_key",
        )
    if consumer_secret and not _SECRET_RE.match(consumer_secret):
        raise RailSettingsError(
            "A consumer secret looks like cs_ and 40 hex characters.", field="consumer_secret"
        )
    webhook_secret = webhook_secret.strip()
    if len(webhook_secret) > 255 or not webhook_secret.isprintable():
        raise RailSettingsError(
            "Paste the webhook's secret (WooCommerce → Settings → Advanced → Webhooks).",
            field="webhook_secret",
        )
    stored = RailAccount.objects.filter(site=site, rail=RailName.WOOCOMMERCE).first()
    if not consumer_key:
        if stored is None or not stored.has_secret:
            raise RailSettingsError(
                "Enter the store's consumer key and secret.", field="consumer_key"
            )
        if stored.connected_account != url:
            raise RailSettingsError(
                f"Enter the consumer key and secret of {url}: the saved ones belong to "
                f"{stored.connected_account}.",
                field="consumer_key",
            )
    if stored is not None:
        check_store_webhook_secret(stored, url=url, webhook_secret=webhook_secret)
    key, secret = consumer_key, consumer_secret
    if not consumer_key and stored is not None:
        key, secret = woo_credentials(stored)
    _check_keys(url, key, secret)
    with transaction.atomic():
        hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)  # as sill.rails.services says
        account = (
            RailAccount.objects.select_for_update()
            .filter(site=site, rail=RailName.WOOCOMMERCE)
            .first()
        )
        if account is None:
            account = RailAccount(site=site, rail=RailName.WOOCOMMERCE, enabled=False)
        connecting, url_before = not account.has_secret, account.connected_account
        if consumer_key:
            account.set_secret(
                json.dumps({"consumer_key": consumer_key, "consumer_secret": consumer_secret})
            )
        if webhook_secret:
            account.set_webhook_secrets([webhook_secret])
        if url != url_before:
            # Where the last sync ended is the old store's: read the new one from the start.
            account.orders_synced_through = None
        account.connected_account = url
        account.save()
        # Signed in the same transaction, like Stripe's: what changed, never a key or secret.
        record_admin_change(
            site=site,
            kind="rail_change",
            actor=actor,
            body={
                "rail": RailName.WOOCOMMERCE,
                "action": "connect" if connecting else "update",
                "store_url": url,
                "store_url_before": None if connecting else url_before,
                "new_key": bool(consumer_key),
                "key_hint": key_hint(consumer_key) if consumer_key else None,
                "webhook_secrets_changed": bool(webhook_secret),
                "webhook_secrets_count": 1 if webhook_secret else None,
            },
        )
    logger.info(
        "woocommerce store %s connected on site %s by %s (new keys %s)",
        url,
        site.pk,
        actor.get_username() if actor is not None else "system",
        "yes" if consumer_key else "no",
    )
    return account


def check_store_webhook_secret(stored: RailAccount, *, url: str, webhook_secret: str) -> None:
    """The account ``stored`` (as saved) given the store at ``url`` with ``webhook_secret``
    ("" keeps the saved one): another store than the saved one takes a webhook secret of its
    own. Kept, the first store's would go on verifying whatever it signs, and its store
    (whose admin sees it on its webhook) could sign orders that Sill files as the new store's;
    the same secret entered again, likewise. The rails page and the Django admin's rail form
    (sill/rails/admin.py, which takes no webhook secret) both hold a save to it."""
    before = stored.connected_account
    if not stored.has_webhook_secrets or before == url:
        return
    if not webhook_secret:
        raise RailSettingsError(
            f"Enter the webhook secret of {url}: the saved one is {before}'s webhook's.",
            field="webhook_secret",
        )
    try:
        secrets_before = stored.get_webhook_secrets()
    except RailSecretUnreadable:
        secrets_before = []  # nothing to compare: it is replaced all the same
    if webhook_secret in secrets_before:
        raise RailSettingsError(
            f"That is {before}'s webhook secret: give the webhook of {url} a secret of its "
            "own (WooCommerce → Settings → Advanced → Webhooks), or whoever holds the first "
            "could sign orders as this store's.",
            field="webhook_secret",
        )


def _check_keys(url: str, consumer_key: str, consumer_secret: str) -> None:
    client = WooClient(
        store_url=url,
        consumer_key=consumer_key,
        consumer_secret=consumer_secret,
        timeout=float(getattr(settings, "SILL_WOOCOMMERCE_TIMEOUT_SECONDS", 20)),
    )
    try:
        client.check_access()
    except WooCannotWrite as exc:
        raise RailSettingsError(
            f"The store refused these keys ({_code(exc.message)}): check the consumer key and "
            "secret, and that their user may read orders. Nothing was saved.",
            field="consumer_key",
        ) from None
    except PermanentRailError as exc:
        raise RailSettingsError(
            f"{url} did not answer as a WooCommerce store ({_code(exc.message)}): check the "
            "address and that the REST API is on. Nothing was saved.",
            field="store_url",
        ) from None
    except RailError:
        raise RailSettingsError(
            f"Sill could not reach {url} to check the keys. Nothing was saved; try again.",
            code="rail_unavailable",
            field="store_url",
        ) from None


def _code(message: str) -> str:
    # "WooCommerce key check failed: woocommerce_rest_cannot_view — …" → the store's code.
    return message.split(": ", 1)[-1].split(" — ", 1)[0]


def check_connection(
    *, store_url: str, consumer_key: str, consumer_secret: str, timeout: float
) -> ConnectionInfo:
    """Settings → Rails' "Test connection": one order read (``WooClient.check_access``).

    Raises ``PermanentRailError`` ``bad_key`` (the store refused the keys) or the store's
    own refusal, ``RetryableRailError`` ``unreachable``. Whether the keys may *write* no read
    can tell (see ``check_access``). WooCommerce has no test mode of its own: its payments run
    on the Stripe rail, whose card says its mode.
    """
    client = WooClient(
        store_url=store_url,
        consumer_key=consumer_key,
        consumer_secret=consumer_secret,
        timeout=timeout,
    )
    try:
        client.check_access()
    except WooCannotWrite as exc:
        raise PermanentRailError(
            f"The store refused these keys ({_code(exc.message)}): check the consumer key and "
            "secret, and that their user may read orders.",
            code="bad_key",
        ) from None
    except PermanentRailError as exc:
        raise PermanentRailError(
            f"{store_url} did not answer as a WooCommerce store ({_code(exc.message)}).",
            code="not_a_store",
        ) from None
    except RailError:
        raise RetryableRailError(
            f"{store_url} could not be reached (no answer in time).", code="unreachable"
        ) from None
    return ConnectionInfo(name=urlsplit(store_url).netloc or store_url)
