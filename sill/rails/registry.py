"""Which rail a site uses, built from its ``RailAccount`` with that account's credentials.

A rail module other than mock and stripe plugs in by defining
``rail_from_account(account: RailAccount) -> Rail`` in ``sill/rails/<rail>.py``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

from django.conf import settings

from sill.accounts.models import Site
from sill.errors import SillError
from sill.orders.models import Rail as RailName
from sill.rails.base import Rail
from sill.rails.mock import MockRail
from sill.rails.models import RailAccount, RailMode
from sill.rails.secrets import WHAT_TO_DO, RailSecretUnreadable
from sill.rails.stripe import StripeRail

logger = logging.getLogger(__name__)


class RailDisabled(SillError):
    code = "rail_disabled"
    status = 409


def rail_account_for(*, site_id: str, rail: str) -> RailAccount:
    """The site's enabled account for ``rail``; ``RailDisabled`` when absent or switched off."""
    account = RailAccount.objects.filter(site_id=site_id, rail=rail, enabled=True).first()
    if account is None:
        raise RailDisabled(f"The {_label(rail)} rail is not enabled for this site.")
    return account


def rail_for(*, site_id: str, rail: str) -> Rail:
    """A ready rail for the site, refusing live money unless ``SILL_ALLOW_LIVE`` is set."""
    return rail_from_account(rail_account_for(site_id=site_id, rail=rail))


def rail_from_account(account: RailAccount) -> Rail:
    if account.mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
        raise RailDisabled(
            f"The {_label(account.rail)} rail is in live mode, and live money is switched off "
            "on this deployment (set SILL_ALLOW_LIVE=1 to allow it)."
        )
    builder = _BUILDERS.get(account.rail) or _plugged_in_builder(account.rail)
    try:
        return builder(account)
    except RailSecretUnreadable as exc:
        # A permanent condition until someone acts: the rail is refused like a switched-off
        # one (refunds fail with rail_disabled instead of being retried against a key that
        # will never open), and the rails page shows the same problem on the rail's card.
        logger.warning(
            "the %s rail of site %s is disabled: its stored credential cannot be decrypted",
            account.rail,
            account.site_id,
        )
        raise RailDisabled(
            f"The {_label(account.rail)} rail is disabled because its stored API key cannot "
            f"be read: {WHAT_TO_DO}."
        ) from exc


def ensure_mock_rail(site: Site) -> RailAccount:
    """The site's mock rail account, created or switched on if needed (demo data, tests)."""
    account, created = RailAccount.objects.get_or_create(
        site=site, rail=RailName.MOCK, defaults={"enabled": True}
    )
    if not created and not account.enabled:
        account.enabled = True
        account.save(update_fields=["enabled", "updated_at"])
    return account


def _mock(account: RailAccount) -> Rail:
    return MockRail(site_id=account.site_id, config=account.config)


def _stripe(account: RailAccount) -> Rail:
    secret = account.get_secret()
    if not secret:
        raise RailDisabled("The Stripe rail has no API key: enter one on the rails settings.")
    key_is_live = "_live_" in secret[:8]
    if key_is_live != (account.mode == RailMode.LIVE):
        raise RailDisabled(
            "The Stripe API key does not match the rail's mode: a live key needs live mode "
            "and a test key needs test mode."
        )
    return StripeRail(
        secret_key=secret,
        connected_account=account.connected_account,
        api_base=account.api_base,
        mode=account.mode,
        fact_timeout=float(settings.SILL_RAIL_FACT_TIMEOUT_SECONDS),
    )


_BUILDERS: dict[str, Callable[[RailAccount], Rail]] = {
    RailName.MOCK: _mock,
    RailName.STRIPE: _stripe,
}


def _plugged_in_builder(rail: str) -> Callable[[RailAccount], Rail]:
    module = None
    if rail in RailName.values:
        try:
            module = importlib.import_module(f"sill.rails.{rail}")
        except ModuleNotFoundError as exc:
            if exc.name != f"sill.rails.{rail}":
                raise
    builder = getattr(module, "rail_from_account", None)
    if builder is None:
        raise RailDisabled(f"The {_label(rail)} rail is not available in this version of Sill.")
    return builder


def _label(rail: str) -> str:
    try:
        return str(RailName(rail).label)
    except ValueError:
        return rail
