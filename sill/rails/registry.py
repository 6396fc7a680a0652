"""Which rail a site uses, built from its ``RailAccount`` with that account's credentials.

A rail module other than mock and stripe plugs in by defining
``rail_from_account(account: RailAccount) -> Rail`` in ``sill/rails/<rail>.py``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

from django.conf import settings
from django.db.models import Exists, Q, Subquery

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


def rail_account_for(
    *, site_id: str, rail: str, provider_account: str = "", payment_account: str = ""
) -> RailAccount:
    """The site's enabled account for ``rail``; ``RailDisabled`` when absent or switched off,
    or when ``provider_account`` or ``payment_account``, the accounts a charge was taken on,
    are not the ones the site is connected to now (:func:`account_moved`,
    :func:`payment_account_moved`)."""
    account = RailAccount.objects.filter(site_id=site_id, rail=rail).first()
    moved = site_account_moved(
        site_id=site_id,
        rail=rail,
        provider_account=provider_account,
        payment_account=payment_account,
        known=account,
    )
    if moved is not None:
        raise moved
    if account is None or not account.enabled:
        raise _not_enabled(rail)
    return account


def usable_rail_account(*, site_id: str, rail: str) -> RailAccount:
    """:func:`rail_account_for`, also refusing what building the rail would refuse
    (:func:`account_unusable`: live mode where live money is off, a stored API key no key
    opens): what a decision asks before answering that a refund is on its way, so that it is
    refused then rather than failed a moment later at execution."""
    account = rail_account_for(site_id=site_id, rail=rail)
    if (unusable := account_unusable(account)) is not None:
        raise unusable
    return account


def rail_refusal(*, site_id: str, rail: str) -> RailDisabled | None:
    """What :func:`usable_rail_account` refuses (one query), as a value: None when the site's
    ``rail`` can refund."""
    try:
        usable_rail_account(site_id=site_id, rail=rail)
    except RailDisabled as refused:
        return refused
    return None


def site_rail_accounts(site_id: str) -> dict[str, RailAccount]:
    """The site's rail accounts by rail, in one query: for a page that asks
    :func:`account_refusal` or :func:`account_moved` of several charges."""
    return {account.rail: account for account in RailAccount.objects.filter(site_id=site_id)}


def account_refusal(account: RailAccount | None, *, rail: str) -> RailDisabled | None:
    """What :func:`usable_rail_account` refuses for ``rail``, given the site's account of it
    as the caller read it (None: the site has none), without a query: absent or switched off,
    or what building the rail would refuse (:func:`account_unusable`). None when it can
    refund."""
    if account is None or not account.enabled:
        return _not_enabled(rail)
    return account_unusable(account)


def account_unusable(account: RailAccount) -> RailDisabled | None:
    """What :func:`rail_from_account` would refuse ``account`` for, in its words, without
    building the rail: live mode on a deployment that does not allow live money, or a stored
    API key no key opens (:func:`key_unreadable`). No query, no write; no work at all for a
    test-mode account without a key (the mock rail)."""
    return _live_off(account) or key_unreadable(account)


def key_unreadable(account: RailAccount) -> RailDisabled | None:
    """``RailDisabled``, in :func:`rail_from_account`'s words, when ``account``'s stored API
    key cannot be decrypted; None when it can or none is stored (no work then).

    Writes nothing and runs no query (``RailAccount.secret_opens``): unlike building the rail,
    which re-encrypts a key stored under a fallback, so a decision can ask it.
    """
    return None if account.secret_opens() else _unreadable(account)


def rail_for(
    *, site_id: str, rail: str, provider_account: str = "", payment_account: str = ""
) -> Rail:
    """A ready rail for the site, refusing live money unless ``SILL_ALLOW_LIVE`` is set.

    ``provider_account``, ``payment_account``: the accounts the charge to be asked about or
    refunded was taken on (``Charge.provider_account``, ``Charge.payment_account``); a site
    connected to another is refused (:func:`account_moved`, :func:`payment_account_moved`),
    and the rail never asked."""
    return rail_from_account(
        rail_account_for(
            site_id=site_id,
            rail=rail,
            provider_account=provider_account,
            payment_account=payment_account,
        )
    )


def account_rail(rail: str) -> str:
    """The rail whose account (``RailAccount.connected_account``) a charge on ``rail`` names in
    ``Charge.provider_account``: its own (a Shopify charge names its shop), or, for a Stripe
    charge, WooCommerce (a Woo store's orders are paid on Stripe, and their charges name the
    store: Woo order ids are the store's alone). Stripe charges of Sill's own purchases name
    no account."""
    return _ACCOUNT_RAILS.get(rail, rail)


def account_moved(
    *, rail: str, provider_account: str, account: RailAccount | None
) -> RailDisabled | None:
    """``RailDisabled``, in words, when a charge on ``rail`` taken on ``provider_account`` (a
    Shopify shop, a WooCommerce store: ``Charge.provider_account``) is not of the account the
    site is connected to now, ``account``: the site's account of :func:`account_rail` (enabled
    or not; None when the site has none). None when it is, or when the charge names no
    account (blank: the one connected now, as before Sill kept it). A caller holding an
    account of the charge's own rail (a Stripe account, for a Woo store's charge) calls
    :func:`site_account_moved` with it instead.

    Such a payment's order is its own account's alone. Shopify's order ids are global, so the
    shop connected now holds no such order, and asking it (with its token) only ever answered
    "no such order"; Woo order ids are per store, so the store connected now holds another
    order (someone else's) under the same id, and Stripe refunded a payment whose order could
    then be marked refunded nowhere. Nothing about the payment is refunded, nor asked of the
    account connected now, until its own account is connected again (so a refusal is
    ``rail_disabled``: the merchant's set-up, not the order). Reading a Woo store's payment
    at Stripe is another matter (:func:`readable_with_connected_account`).
    """
    if not provider_account:
        return None
    owner = account_rail(rail)
    connected = account.connected_account if account is not None else ""
    if connected == provider_account:
        return None
    return _moved(rail=owner, noun=account_noun(rail), taken_on=provider_account, now=connected)


def payment_account_moved(
    *, rail: str, payment_account: str, account: RailAccount | None
) -> RailDisabled | None:
    """``RailDisabled``, in :func:`account_moved`'s words, when a charge on ``rail`` was taken
    on ``payment_account`` (a Stripe account and mode, a PayPal merchant account:
    ``Charge.payment_account``) and the site's key or app of ``rail`` now acts on another,
    ``account`` being the site's account of ``rail`` (None: it has none). None when it is the
    same, or when either is unknown (blank: a charge from before Sill kept it; credentials
    the provider has not named, or would not): as before.

    Another Stripe account, or the other mode of the same one, holds no such payment, nor
    does another PayPal merchant's app: a refund would be refused (Stripe's
    ``resource_missing``, PayPal's 404 ``RESOURCE_NOT_FOUND``) at execution after the agent
    was told it was on its way, and every reconciliation would count the charge unreadable.
    Nothing about it is asked of the provider until credentials of its account are saved
    again (sill.rails.payment_account).
    """
    connected = account.payment_account if account is not None else ""
    if not payment_account or not connected or connected == payment_account:
        return None
    return _moved(rail=rail, noun="account", taken_on=payment_account, now=connected)


def payment_account_unnamed(
    *, site_id: str, rail: str, payment_account: str
) -> RailDisabled | None:
    """For a call that must find what an earlier call made (a refund that may exist at the
    rail): ``RailDisabled`` when the charge names the account its money is on and the site's
    key of ``rail`` names none. That key was replaced since the charge (a key's account is
    only cleared when it changes), perhaps by another account's, whose "no such refund" would
    not be the first account's answer; once it is named, :func:`payment_account_moved` says
    whether it is the same. None otherwise, and without a query for a charge naming none."""
    if not payment_account:
        return None
    account = RailAccount.objects.filter(site_id=site_id, rail=rail).first()
    if account is None or account.payment_account:
        return None
    return RailDisabled(
        f"This charge was paid on the {_label(rail)} account {payment_account}, and "
        f"{_label(rail)} has not said which account the site's key acts on now, so Sill does "
        "not ask that key whether an earlier attempt of this refund went through: it may not "
        "see that account. Sill asks again once the key's account is named."
    )


def _moved(*, rail: str, noun: str, taken_on: str, now: str) -> RailDisabled:
    connected = f"it is now connected to {now}" if now else f"no {noun} is connected now"
    return RailDisabled(
        f"This order came from the {_label(rail)} {noun} {taken_on}, which this site "
        f"is no longer connected to ({connected}), so it cannot be refunded through Sill until "
        f"{taken_on} is connected again."
    )


def site_account_moved(
    *,
    site_id: str,
    rail: str,
    provider_account: str,
    payment_account: str = "",
    known: RailAccount | None = None,
) -> RailDisabled | None:
    """:func:`account_moved`, reading the site's account of :func:`account_rail`, then
    :func:`payment_account_moved`, reading the site's account of ``rail`` (no query for a
    check whose account the charge does not name, nor when ``known``, an account the caller
    already read, is the one needed)."""

    def site_account(of: str) -> RailAccount | None:
        if known is not None and known.rail == of:
            return known
        return RailAccount.objects.filter(site_id=site_id, rail=of).first()

    if provider_account:
        moved = account_moved(
            rail=rail, provider_account=provider_account, account=site_account(account_rail(rail))
        )
        if moved is not None:
            return moved
    if payment_account:
        return payment_account_moved(
            rail=rail, payment_account=payment_account, account=site_account(rail)
        )
    return None


def connected_account_of(*, site_id: str, rail: str) -> Subquery:
    """The ``connected_account`` of the site's account that charges on ``rail`` name
    (:func:`account_rail`), as a subquery (NULL when the site has none): for filters that
    keep a rail's orders to those of the shop or store connected now."""
    account = RailAccount.objects.filter(site_id=site_id, rail=account_rail(rail))
    return Subquery(account.values("connected_account")[:1])


def on_connected_account(*, site_id: str, rail: str) -> Q:
    """A filter of charges on ``rail`` to those :func:`account_moved` lets through: taken on the
    account the site is connected to now, or naming none (a site with no such account keeps
    only those). A subquery, no query of its own."""
    return Q(provider_account="") | Q(
        provider_account=connected_account_of(site_id=site_id, rail=rail)
    )


def readable_with_connected_account(*, site_id: str, rail: str) -> Q:
    """A filter of charges on ``rail`` to those the site's account of ``rail`` can be *asked
    about* (their refunds and disputes read, as reconciliation does; never refunded: a refund
    goes by :func:`account_moved`). A subquery at most, no query of its own.

    Where a charge names an account of its own rail (a Shopify charge, its shop), that is
    :func:`on_connected_account`: an earlier shop's order can only be read with that shop's
    token, which went when the site switched shops, and the shop connected now holds no such
    order. Where it names another rail's account (a Stripe charge, its WooCommerce store:
    :func:`account_rail`), every charge: the payment is on the Stripe account whichever store
    is connected, and Stripe answers about it while that account is connected, so a refund
    made in Stripe's dashboard or a dispute of an earlier store's order is still reconciled
    (its refundable amount, on the order page and the rails card, stays right). A Stripe
    charge of another Stripe account than the site's key acts on now is not, nor a PayPal
    capture of another merchant account than the site's app's (:func:`on_payment_account`):
    the provider holds no such payment for these credentials.
    """
    if account_rail(rail) != rail:
        # Stripe: the Woo store does not hold the payment, the Stripe account does.
        return on_payment_account(site_id=site_id, rail=rail)
    # Shopify stays as it was: an earlier shop's charge cannot be read at all. PayPal's
    # charges name no shop, its Shopify's no payment account: each keeps to its own.
    return on_connected_account(site_id=site_id, rail=rail) & on_payment_account(
        site_id=site_id, rail=rail
    )


def on_payment_account(*, site_id: str, rail: str) -> Q:
    """A filter of charges on ``rail`` to those :func:`payment_account_moved` lets through:
    taken on the account the site's key acts on now, or on an unknown one (blank), or any
    while the site's key names none. Subqueries, no query of their own."""
    account = RailAccount.objects.filter(site_id=site_id, rail=rail)
    named = account.exclude(payment_account="")
    return (
        Q(payment_account="")
        | Q(payment_account=Subquery(account.values("payment_account")[:1]))
        | Q(~Exists(named))
    )


def account_noun(rail: str) -> str:
    """What one account of the rail a charge on ``rail`` names is called: "shop" (Shopify),
    "store" (WooCommerce, for a Stripe charge), else "account"."""
    return _ACCOUNT_NOUNS.get(account_rail(rail), "account")


def rail_from_account(account: RailAccount) -> Rail:
    if (live_off := _live_off(account)) is not None:
        raise live_off
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
        raise _unreadable(account) from exc


def _live_off(account: RailAccount) -> RailDisabled | None:
    if account.mode != RailMode.LIVE or settings.SILL_ALLOW_LIVE:
        return None
    return RailDisabled(
        f"The {_label(account.rail)} rail is in live mode, and live money is switched off "
        "on this deployment (whoever runs Sill can allow it with SILL_ALLOW_LIVE=1)."
    )


def _not_enabled(rail: str) -> RailDisabled:
    return RailDisabled(f"The {_label(rail)} rail is not enabled for this site.")


def _unreadable(account: RailAccount) -> RailDisabled:
    return RailDisabled(
        f"The {_label(account.rail)} rail is disabled because its stored API key cannot be "
        f"read: {WHAT_TO_DO}."
    )


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


# What one of a rail's accounts is called, where it is not "account".
_ACCOUNT_NOUNS: dict[str, str] = {RailName.SHOPIFY: "shop", RailName.WOOCOMMERCE: "store"}

# The rail whose account a charge's ``provider_account`` names, where it is not the charge's
# own (account_rail).
_ACCOUNT_RAILS: dict[str, str] = {RailName.STRIPE: RailName.WOOCOMMERCE}

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
