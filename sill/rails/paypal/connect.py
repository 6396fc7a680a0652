"""Connecting PayPal on Settings → Rails: the REST app's client id and secret, mode, webhook id.

The client secret is write-only: encrypted into the account, never logged, rendered or
returned. Saving asks PayPal for an access token with the id and secret
(``POST /v1/oauth2/token``, which moves nothing): credentials PayPal refuses, or a PayPal
Sill cannot reach, save nothing. Which merchant account the app acts on is asked afterwards,
in a task enqueued on commit (sill.rails.payment_account). Sandbox is the default; live mode
is refused unless the deployment runs with ``SILL_ALLOW_LIVE=1``. The webhook id (PayPal's id
of the webhook that posts to ``/webhooks/paypal/<site_id>``) is not a secret: PayPal needs it
to verify each delivery, and without it deliveries are refused.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.db import transaction

from sill.accounts import two_factor
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.admin_audit import record_admin_change
from sill.accounts.models import Site
from sill.queue import enqueue_on_commit
from sill.rails.base import (
    ConnectionInfo,
    PermanentRailError,
    RailError,
    RailName,
    RetryableRailError,
)
from sill.rails.models import RailAccount, RailMode
from sill.rails.paypal.client import LIVE_API, SANDBOX_API, PayPalClient
from sill.rails.services import RailSettingsError, _check_api_base

logger = logging.getLogger(__name__)

# PayPal's REST credentials are URL-safe base64-ish strings (80 characters today).
_CREDENTIAL_RE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
_WEBHOOK_ID_RE = re.compile(r"^[A-Z0-9]{8,40}$")


def secret_hint(secret: str) -> str:
    return f"…{secret[-4:]}" if len(secret) > 12 else "…"


def configure_paypal(
    *,
    site: Site,
    actor: Any,
    client_id: str,
    client_secret: str,
    mode: str,
    webhook_id: str,
    api_base: str | None = None,
    second_factor: two_factor.Freshness,
) -> RailAccount:
    """Save the site's PayPal app after PayPal accepted its credentials.

    An empty ``client_secret`` keeps the stored one, unless the client id changes (a secret
    belongs to one app). ``webhook_id`` is saved as given (empty: deliveries are refused).
    ``api_base`` (DEBUG only, for a loopback server) ``None`` keeps the stored value. A new
    PayPal account starts switched off. Raises ``RailSettingsError``; nothing is saved then.
    A new secret or a save in live mode is refused by ``second_factor`` without a fresh code
    (``two_factor.TwoFactorRequired``), before PayPal is called. The webhook id is no secret:
    PayPal itself verifies each delivery for the app whose credentials Sill holds.
    """
    # First: a refused caller must not even get the provider called with what it sent.
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    client_id, client_secret = client_id.strip(), client_secret.strip()
    two_factor.check_widening(second_factor, widens=bool(client_secret) or mode == RailMode.LIVE)
    webhook_id = webhook_id.strip()
    if mode not in RailMode.values:
        raise RailSettingsError("Choose sandbox or live mode.", field="mode")
    if mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
        raise RailSettingsError(
            "Live mode is switched off on this deployment: Sill moves no real money unless "
            "it runs with SILL_ALLOW_LIVE=1. Use sandbox mode with a sandbox app.",
            code="live_not_allowed",
            field="mode",
        )
    if not _CREDENTIAL_RE.match(client_id):
        raise RailSettingsError(
            "Enter the REST app's client id (PayPal Developer → Apps & Credentials).",
            field="client_id",
        )
    if client_secret and not _CREDENTIAL_RE.match(client_secret):
        raise RailSettingsError(
            "The client secret has unexpected characters; copy it again from PayPal.",
            field="client_secret",
        )
    if webhook_id and not _WEBHOOK_ID_RE.match(webhook_id):
        raise RailSettingsError(
            "A webhook id looks like 8PT597110X687430LKGECATA (PayPal Developer → your app → "
            "Webhooks).",
            field="webhook_id",
        )
    if api_base is not None:
        api_base = _check_api_base(api_base.strip())
    stored = RailAccount.objects.filter(site=site, rail=RailName.PAYPAL).first()
    stored_id = str((stored.config or {}).get("client_id") or "") if stored else ""
    if not client_secret:
        if stored is None or not stored.has_secret:
            raise RailSettingsError("Enter the client secret.", field="client_secret")
        if stored_id != client_id:
            raise RailSettingsError(
                "Enter the client secret of this client id: the saved secret belongs to "
                "another app.",
                field="client_secret",
            )
    base = api_base if api_base is not None else (stored.api_base if stored else "")
    if not base:
        base = LIVE_API if mode == RailMode.LIVE else SANDBOX_API
    _check_credentials(
        client_id, client_secret or (stored.get_secret() if stored else ""), base, mode
    )

    with transaction.atomic():
        hold_member(actor, site.pk, Cap.MANAGE_SETTINGS)  # as sill.rails.services says
        account = (
            RailAccount.objects.select_for_update().filter(site=site, rail=RailName.PAYPAL).first()
        ) or RailAccount(site=site, rail=RailName.PAYPAL, enabled=False)
        connecting, mode_before = not account.has_secret, account.mode
        webhook_before = str((account.config or {}).get("webhook_id") or "")
        before = (str((account.config or {}).get("client_id") or ""), mode_before, account.api_base)
        if client_secret:
            account.set_secret(client_secret)
        account.mode = mode
        account.config = {
            **(account.config or {}),
            "client_id": client_id,
            "webhook_id": webhook_id,
        }
        if api_base is not None:
            account.api_base = api_base
        relearn = bool(client_secret) or before != (client_id, mode, account.api_base)
        if relearn:
            # Another app may be another merchant account's: unknown until PayPal names it
            # (sill.rails.payment_account), after this commits.
            account.payment_account = ""
        account.save()
        if relearn:
            enqueue_on_commit(
                "rails.learn_payment_account",
                account.pk,
                recovered_by="rails.learn_payment_accounts",
            )
        # Signed in the same transaction, like Stripe's: what changed, never the secret.
        record_admin_change(
            site=site,
            kind="rail_change",
            actor=actor,
            body={
                "rail": RailName.PAYPAL,
                "action": "connect" if connecting else "update",
                "mode": mode,
                "mode_before": None if connecting else mode_before,
                "new_key": bool(client_secret),
                "client_id": client_id,
                "webhook_id_changed": webhook_id != webhook_before,
            },
        )
    logger.info(
        "paypal rail configured on site %s by %s (mode %s, new secret %s)",
        site.pk,
        actor.get_username() if actor is not None else "system",
        mode,
        "yes" if client_secret else "no",
    )
    return account


def _check_credentials(client_id: str, secret: str, api_base: str, mode: str) -> None:
    where = "PayPal's sandbox" if mode == RailMode.TEST else "PayPal (live)"
    client = PayPalClient(
        client_id=client_id,
        client_secret=secret,
        api_base=api_base,
        timeout=float(getattr(settings, "SILL_PAYPAL_TIMEOUT_SECONDS", 20)),
    )
    try:
        client.sign_in()
    except PermanentRailError:
        raise RailSettingsError(
            f"{where} refused this client id and secret: check that they belong to the same "
            "REST app, and that a sandbox app is used in sandbox mode. Nothing was saved.",
            field="client_secret",
        ) from None
    except RailError:
        raise RailSettingsError(
            f"Sill could not reach {where} to check the credentials. Nothing was saved; try again.",
            code="rail_unavailable",
            field="client_id",
        ) from None


def check_connection(
    *, client_id: str, client_secret: str, api_base: str, mode: str, timeout: float
) -> ConnectionInfo:
    """Settings → Rails' "Test connection": a *fresh* OAuth token (never the cached one, so
    a secret revoked since is found out). Raises ``PermanentRailError`` ``bad_key`` or
    ``RetryableRailError`` ``unreachable``."""
    where = "PayPal's sandbox" if mode == RailMode.TEST else "PayPal (live)"
    client = PayPalClient(
        client_id=client_id, client_secret=client_secret, api_base=api_base, timeout=timeout
    )
    try:
        app = client.fresh_sign_in()
    except PermanentRailError:
        raise PermanentRailError(
            f"{where} refused the client id and secret: they may be mistyped, from another "
            "app, or (in sandbox mode) a live app's.",
            code="bad_key",
        ) from None
    except RailError:
        raise RetryableRailError(
            f"{where} could not be reached (no answer in time).", code="unreachable"
        ) from None
    return ConnectionInfo(name=app or f"REST app {client_id[:8]}…", test_mode=mode == RailMode.TEST)
