"""Writes to a site's rail accounts (Settings → Rails).

Nothing here calls a provider: rails are called from Celery tasks only, so saving a key does
not prove it works; the first refund on the rail does (which Stripe account a saved key acts
on is asked in such a task, enqueued on commit: sill.rails.payment_account). The secret key is
write-only: it is encrypted into ``RailAccount.secret_encrypted`` and never logged or
returned; pages show :func:`key_hint` at most.

Each service first checks that ``actor`` is a member of the site whose role manages settings
(``require_member``, 403 ``forbidden``), as the Settings → Rails views do: a rail's keys say
where the site's refunds go, so no other caller may change them for a member who may not.
Each checks again first in its transaction (``hold_member``), held until it commits (here and
in each rail's ``connect``, which asks the provider about the credentials in between): an
owner's removal or demotion of ``actor`` that came first (it may have waited for the audit
chain behind another append) refuses the change, one that comes later waits for it. The
member's rows, then the rail account's, then the chain head.

Each also takes ``second_factor``, required (the view's ``two_factor.freshness``;
``two_factor.OPERATOR`` for an operator's tool), and refuses a change that lets real money
move or hands out what signs the events Sill acts on without a code entered in the last few
minutes (``two_factor.TwoFactorRequired``, nothing written or sent to a provider): a new key,
token or webhook signing secret, a save in live mode, a live account switched on. Switching a
rail off never needs one: it is the brake.
"""

from __future__ import annotations

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
from sill.errors import SillError
from sill.orders.models import Rail
from sill.queue import enqueue_on_commit
from sill.rails.models import RailAccount, RailMode

logger = logging.getLogger(__name__)

# Rails that Sill can configure and call today; the others are listed as "not available yet".
CONFIGURABLE_RAILS: tuple[str, ...] = (
    Rail.MOCK,
    Rail.STRIPE,
    Rail.SHOPIFY,
    Rail.WOOCOMMERCE,
    Rail.PAYPAL,
)
STRIPE_KEY_PREFIXES = ("sk_test_", "sk_live_", "rk_test_", "rk_live_")
_STRIPE_KEY_RE = re.compile(r"^(?:sk|rk)_(?:test|live)_[A-Za-z0-9]{8,250}$")
_CONNECTED_ACCOUNT_RE = re.compile(r"^acct_[A-Za-z0-9]{1,250}$")


class RailSettingsError(SillError):
    code = "invalid_field"
    status = 422


def key_hint(secret: str) -> str:
    """``sk_test_…abcd``: the prefix and last four characters, never more."""
    if len(secret) < 16:
        return secret[:3] + "…"
    return f"{secret[:8]}…{secret[-4:]}"


def set_rail_enabled(
    *, site: Site, actor: Any, rail: str, enabled: bool, second_factor: two_factor.Freshness
) -> RailAccount:
    """Switch ``rail`` on or off for ``site``; Stripe needs a saved key before it is switched on.

    Switching on an account saved in live mode lets real money move, as saving it in live
    mode does: ``second_factor`` refuses it without a fresh code. Judged on the row as locked
    here, so a live-mode save committed while this waited for the lock counts."""
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    if rail not in CONFIGURABLE_RAILS:
        raise RailSettingsError(
            f"The {_label(rail)} rail is not available yet.", code="rail_unavailable", field="rail"
        )
    with transaction.atomic():
        hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)  # see the module's docstring
        account = RailAccount.objects.select_for_update().filter(site=site, rail=rail).first()
        if account is None:
            account = RailAccount(site=site, rail=rail, enabled=False)
        two_factor.check_widening(
            second_factor,
            widens=enabled and not account.enabled and account.mode == RailMode.LIVE,
        )
        if enabled and rail == Rail.STRIPE and not account.has_secret:
            raise RailSettingsError(
                "Save a Stripe secret key before switching the Stripe rail on.",
                field="secret_key",
            )
        if enabled and rail == Rail.SHOPIFY and not account.has_secret:
            raise RailSettingsError(
                "Connect a store with its access token before switching the Shopify rail on.",
                field="access_token",
            )
        if enabled and rail == Rail.PAYPAL and not account.has_secret:
            raise RailSettingsError(
                "Save the PayPal app's client id and secret before switching the PayPal rail on.",
                field="client_secret",
            )
        if enabled and rail == Rail.WOOCOMMERCE:
            _check_woocommerce_can_refund(site, account)
        was_enabled = account.enabled
        account.enabled = enabled
        account.save()
        if was_enabled != enabled:  # signed, with the switch, in the same transaction
            record_admin_change(
                site=site,
                kind="rail_change",
                actor=actor,
                body={"rail": rail, "action": "enable" if enabled else "disable"},
            )
    logger.info(
        "rail %s %s on site %s by %s",
        rail,
        "enabled" if enabled else "disabled",
        site.pk,
        _who(actor),
    )
    return account


def _check_woocommerce_can_refund(site: Site, account: RailAccount) -> None:
    """A WooCommerce store's payments are Stripe charges: without the site's Stripe rail on
    and keyed, its refunds could only be refused, so the store is not switched on."""
    if not account.has_secret:
        raise RailSettingsError(
            "Connect the store with its consumer key and secret before switching it on.",
            field="consumer_key",
        )
    stripe = RailAccount.objects.filter(site=site, rail=Rail.STRIPE).first()
    if stripe is None or not stripe.has_secret or not stripe.enabled:
        raise RailSettingsError(
            "Connect Stripe first: this store's payments are Stripe charges, so its refunds "
            "run on the site's Stripe rail. Save the store's Stripe secret key and switch the "
            "Stripe rail on, then switch WooCommerce on.",
            code="rail_disabled",
            field="enabled",
        )


def configure_stripe(
    *,
    site: Site,
    actor: Any,
    secret_key: str,
    connected_account: str,
    mode: str,
    api_base: str | None = None,
    webhook_secrets: str = "",
    second_factor: two_factor.Freshness,
) -> RailAccount:
    """Save the site's Stripe credentials; an empty ``secret_key`` keeps the stored one.

    ``webhook_secrets`` holds the endpoint's signing secrets, one per line (several while one
    is rotated); empty keeps the stored ones.

    ``api_base`` is only accepted when ``settings.DEBUG`` is on (it exists for localstripe);
    ``None`` leaves the stored value alone. A new Stripe account starts switched off.

    A new key or signing secret (whoever holds one can forge the events Sill acts on: a
    refund reported failed is refundable again), or a save in live mode, is refused by
    ``second_factor`` without a fresh code, before the input is judged.
    """
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    secret_key = secret_key.strip()
    connected_account = connected_account.strip()
    two_factor.check_widening(
        second_factor,
        widens=bool(secret_key) or bool(webhook_secrets.strip()) or mode == RailMode.LIVE,
    )
    if mode not in RailMode.values:
        raise RailSettingsError("Choose test or live mode.", field="mode")
    if mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
        raise RailSettingsError(
            "Live mode is switched off on this deployment: Sill moves no real money unless "
            "it runs with SILL_ALLOW_LIVE=1. Use test mode with a test key.",
            code="live_not_allowed",
            field="mode",
        )
    if secret_key:
        _check_key(secret_key)
    if connected_account and not _CONNECTED_ACCOUNT_RE.match(connected_account):
        raise RailSettingsError(
            "A connected account id looks like acct_1A2b3C…; leave it empty if you don't use "
            "Stripe Connect.",
            field="connected_account",
        )
    if api_base is not None:
        api_base = _check_api_base(api_base.strip())
    signing = [line.strip() for line in webhook_secrets.splitlines() if line.strip()]
    if any(not line.startswith("whsec_") or len(line) > 255 for line in signing):
        raise RailSettingsError(
            "Each signing secret starts with whsec_ (one per line).", field="webhook_secrets"
        )

    with transaction.atomic():
        hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)  # see the module's docstring
        account = (
            RailAccount.objects.select_for_update().filter(site=site, rail=Rail.STRIPE).first()
        )
        if account is None:
            account = RailAccount(site=site, rail=Rail.STRIPE, enabled=False)
        connecting, mode_before = not account.has_secret, account.mode
        if not secret_key and not account.has_secret:
            raise RailSettingsError("Enter the Stripe secret key.", field="secret_key")
        # Checked against the stored key too, so switching mode alone can't mismatch it.
        effective = secret_key or account.get_secret()
        if ("_live_" in effective[:8]) != (mode == RailMode.LIVE):
            kind = "live" if "_live_" in effective[:8] else "test"
            raise RailSettingsError(
                f"The key is a {kind} key ({effective[:8]}…) but the mode is {mode}: a live "
                "key needs live mode and a test key needs test mode.",
                field="secret_key" if secret_key else "mode",
            )
        if secret_key:
            account.set_secret(secret_key)
        if signing:
            account.set_webhook_secrets(signing)
        before = (account.mode, account.connected_account, account.api_base)
        account.mode = mode
        account.connected_account = connected_account
        if api_base is not None:
            account.api_base = api_base
        relearn = bool(secret_key) or before != (mode, connected_account, account.api_base)
        if relearn:
            # Another key, mode or Connect account may act on another Stripe account: unknown
            # until Stripe names it (sill.rails.payment_account), after this commits.
            account.payment_account = ""
        account.save()
        if relearn:
            enqueue_on_commit(
                "rails.learn_payment_account",
                account.pk,
                recovered_by="rails.learn_payment_accounts",
            )
        # Signed in the same transaction: what changed, never a key or secret (counts only).
        record_admin_change(
            site=site,
            kind="rail_change",
            actor=actor,
            body={
                "rail": Rail.STRIPE,
                "action": "connect" if connecting else "update",
                "mode": mode,
                "mode_before": None if connecting else mode_before,
                "new_key": bool(secret_key),
                "connected_account": connected_account,
                "webhook_secrets_changed": bool(signing),
                "webhook_secrets_count": len(signing) if signing else None,
            },
        )
    # Never the key itself: only which account changed, by whom, and whether the key did.
    logger.info(
        "stripe rail configured on site %s by %s (mode %s, new key %s)",
        site.pk,
        _who(actor),
        mode,
        "yes" if secret_key else "no",
    )
    return account


def _check_key(secret_key: str) -> None:
    if not secret_key.startswith(STRIPE_KEY_PREFIXES):
        raise RailSettingsError(
            "That is not a Stripe secret key: it starts with sk_test_, sk_live_, rk_test_ or "
            "rk_live_ (publishable pk_ keys can't refund).",
            field="secret_key",
        )
    if not _STRIPE_KEY_RE.match(secret_key):
        raise RailSettingsError(
            "The secret key has unexpected characters; paste it again from the Stripe dashboard.",
            field="secret_key",
        )


def _check_api_base(api_base: str) -> str:
    if not api_base:
        return ""
    if not settings.DEBUG:
        raise RailSettingsError(
            "The API address can only be overridden when DEBUG is on.", field="api_base"
        )
    parts = urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RailSettingsError(
            "Enter an http(s) address, e.g. http://127.0.0.1:8420.", field="api_base"
        )
    return api_base.rstrip("/")


def _who(actor: Any) -> str:
    return actor.get_username() if actor is not None else "system"


def _label(rail: str) -> str:
    return str(Rail(rail).label) if rail in Rail.values else rail
