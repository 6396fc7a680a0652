"""Which Stripe account a site's key acts on, or which PayPal merchant account its REST app's
credentials do (``RailAccount.payment_account``), and so which account each charge's money is
on (``Charge.payment_account``).

A Stripe key is one account's, in one mode. When the merchant replaces it with a key of
another account (or switches test and live), the charges taken before are on the earlier
account: Stripe answers ``resource_missing`` for them, to a refund and to reconciliation
alike. A site's shop or store is typed in by the merchant; a Stripe key names no account, so
Sill asks Stripe (GET /v1/account) once the key is saved, in a task (rails are called from
Celery tasks, never from the settings form), and records the answer on the rail account.
Each charge then records the account it was taken on, and a charge of an earlier account is
refused like an earlier Shopify shop's (sill.rails.registry.payment_account_moved).

Until Stripe has answered, or where it will not (a restricted key without account access),
the account is blank: unknown, and nothing is refused for it, as before Sill kept it.

PayPal is the same with its own words. A REST app's client id and secret are one merchant
account's, and a capture is its payee's alone (another merchant's app is answered 404
``RESOURCE_NOT_FOUND``). PayPal names the app's account in its balances report (``account_id``,
an app with the balances scope: sill.rails.paypal.rail.PayPalRail.payment_account), and each
capture names the account it was paid to (``payee.merchant_id``). Sill takes no PayPal
payments, so a PayPal charge is named afterwards: while the site's app's account is named,
the beat task reads the captures of the site's PayPal charges that name none (newest first,
within PayPal's 180 days) and records the account of each that the app's own account was paid
(:func:`name_paypal_charges`). A capture PayPal does not show to the app, or paid to another
account than the app's, is left unnamed: unknown, as before.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from sill.orders.charging import purchase_decision_hash
from sill.orders.models import Charge, ChargeStatus, Rail
from sill.rails.left_behind import PAYMENT_ACCOUNT_RAILS
from sill.rails.models import RailAccount
from sill.rails.paypal.rail import REFUND_WINDOW_DAYS, PayPalRail
from sill.rails.registry import RailDisabled, rail_from_account
from sill.rails.stripe import StripeRail

logger = logging.getLogger(__name__)


def learn_payment_account(*, account_pk: int) -> str:
    """Ask the provider which account the site's Stripe key or PayPal app acts on and record
    it on the rail account; returns it (``""``: unknown). Recorded only while the key (or
    client id and secret), mode, Connect account, address and config it was read with are
    still the stored ones: an answer about credentials the merchant replaced meanwhile is
    never written over the new ones'. A PayPal account named, its charges are named too
    (:func:`name_paypal_charges`)."""
    account = RailAccount.objects.filter(pk=account_pk, rail__in=PAYMENT_ACCOUNT_RAILS).first()
    if account is None or not account.has_secret:
        return ""
    try:
        rail = rail_from_account(account)  # the refusals a refund would meet: live off, no key
        named = _ask(account, rail)
    except RailDisabled as refused:
        logger.info(
            "%s account of site %s not read: %s", account.rail, account.site_id, refused.code
        )
        return ""
    recorded = _record_account(account, named)
    logger.info("%s account of site %s: %s", account.rail, account.site_id, named or "not named")
    if recorded and named and isinstance(rail, PayPalRail):
        account.payment_account = named
        name_paypal_charges(account=account, rail=rail)
    return named


def _record_account(account: RailAccount, named: str) -> bool:
    """Record ``named`` on ``account`` if its credentials are still those it was read with
    (whether they are), with a signed ``rail_change`` record when that changes it: which
    account the site's key acts on decides which charges' refunds are refused."""
    with transaction.atomic():
        stored = (
            RailAccount.objects.select_for_update()
            .filter(
                pk=account.pk,
                secret_encrypted=bytes(account.secret_encrypted),
                mode=account.mode,
                connected_account=account.connected_account,
                api_base=account.api_base,
                config=account.config,
            )
            .first()
        )
        if stored is None:
            return False
        if stored.payment_account != named:
            RailAccount.objects.filter(pk=stored.pk).update(payment_account=named)
            append_record(
                site=stored.site,
                kind=AuditKind.RAIL_CHANGE,
                body={
                    "rail": stored.rail,
                    "action": "account_named",
                    "mode": stored.mode,
                    "payment_account": named,
                    "payment_account_before": stored.payment_account,
                    "actor": None,  # Sill, by the provider's word
                },
            )
    return True


def _ask(account: RailAccount, rail: object) -> str:
    if isinstance(rail, PayPalRail):
        return rail.payment_account()
    return StripeRail(
        secret_key=account.get_secret(),
        connected_account=account.connected_account,
        api_base=account.api_base,
        mode=account.mode,
        timeout=float(settings.SILL_RAIL_CHECK_TIMEOUT_SECONDS),
    ).payment_account()


def name_paypal_charges(*, account: RailAccount, rail: PayPalRail) -> int:
    """Record ``account``'s merchant (``payment_account``, named) on the site's PayPal charges
    that name no account and whose capture PayPal shows ``rail`` (the account's credentials)
    as paid to that merchant; how many were named. At most :data:`CAPTURES_PER_RUN` captures
    are read, newest charge first, of those PayPal still refunds (180 days).

    Only the credentials' own account is recorded: a capture paid to another (a platform
    app's sellers) is left unnamed, so nothing about it changes. A charge of an earlier
    merchant whose capture was never read while its app was connected stays unnamed
    (unknown): PayPal shows its capture to no other app.
    """
    merchant = account.payment_account
    if not merchant:
        return 0
    named = 0
    for pk, capture_id in _unnamed_paypal_charges(account.site_id)[:CAPTURES_PER_RUN]:
        if rail.capture_account(capture_id) != merchant:
            continue
        named += _name_charge(account, pk=pk, capture_id=capture_id, merchant=merchant)
    if named:
        logger.info("named %s PayPal charge(s) of site %s", named, account.site_id)
    return named


def _name_charge(account: RailAccount, *, pk: str, capture_id: str, merchant: str) -> int:
    """Record ``merchant`` on the PayPal charge ``pk`` that names no account yet, with a
    signed ``charge`` record: a refund of it is refused once another merchant's app is
    connected. 1 if named, 0 if it named one already."""
    with transaction.atomic():
        if not Charge.objects.filter(pk=pk, payment_account="").update(payment_account=merchant):
            return 0
        charge = Charge.objects.select_related("order").get(pk=pk)
        append_record(
            site=account.site,
            kind=AuditKind.CHARGE,
            body={
                "decision_hash": purchase_decision_hash(charge.order),
                "order_id": charge.order_id,
                "order_number": charge.order.number,
                "charge_id": charge.pk,
                "rail": Rail.PAYPAL,
                "provider_charge_id": capture_id,
                "payment_account": merchant,
                "source": "paypal: the capture's payee",
            },
        )
    return 1


def _unnamed_paypal_charges(site_id: str) -> QuerySet[Charge, tuple[str, str]]:
    since = timezone.now() - timedelta(days=REFUND_WINDOW_DAYS)
    return (
        Charge.objects.filter(
            order__site_id=site_id,
            rail=Rail.PAYPAL,
            status=ChargeStatus.SUCCEEDED,
            payment_account="",
        )
        .filter(Q(captured_at__gte=since) | Q(captured_at__isnull=True))
        .exclude(provider_charge_id="")
        .order_by("-pk")
        .values_list("pk", "provider_charge_id")
    )


# Registered in workers by sill.rails.tasks, which imports it; the settings service enqueues it
# by name, on commit (sill.queue).
@shared_task(name="rails.learn_payment_account")
def learn_payment_account_task(account_pk: int) -> str:
    return learn_payment_account(account_pk=account_pk)


def unnamed_payment_accounts() -> list[int]:
    """The enabled Stripe and PayPal accounts with credentials whose account the provider has
    not named: the lookup enqueued when they were saved never ran (the broker was down), the
    provider failed to answer it, or will not say (a restricted Stripe key, a PayPal app
    without the balances scope); at most :data:`ASKED_PER_RUN`, oldest first."""
    return list(
        RailAccount.objects.filter(rail__in=PAYMENT_ACCOUNT_RAILS, enabled=True, payment_account="")
        .exclude(secret_encrypted=b"")
        .order_by("pk")
        .values_list("pk", flat=True)[:ASKED_PER_RUN]
    )


def paypal_accounts_with_unnamed_charges() -> list[int]:
    """The enabled, named PayPal accounts whose site has PayPal charges naming no account
    that PayPal still refunds; at most :data:`ASKED_PER_RUN`, oldest first."""
    since = timezone.now() - timedelta(days=REFUND_WINDOW_DAYS)
    unnamed = Charge.objects.filter(
        order__site_id=OuterRef("site_id"),
        rail=Rail.PAYPAL,
        status=ChargeStatus.SUCCEEDED,
        payment_account="",
    ).filter(Q(captured_at__gte=since) | Q(captured_at__isnull=True))
    return list(
        RailAccount.objects.filter(rail=Rail.PAYPAL, enabled=True)
        .exclude(payment_account="")
        .exclude(secret_encrypted=b"")
        .filter(Exists(unnamed.exclude(provider_charge_id="")))
        .order_by("pk")
        .values_list("pk", flat=True)[:ASKED_PER_RUN]
    )


def name_paypal_charges_of(*, account_pk: int) -> int:
    """:func:`name_paypal_charges` with the account's credentials as stored now."""
    account = RailAccount.objects.filter(pk=account_pk, rail=Rail.PAYPAL, enabled=True).first()
    if account is None or not account.payment_account:
        return 0
    try:
        rail = rail_from_account(account)
    except RailDisabled:
        return 0
    if not isinstance(rail, PayPalRail):
        return 0
    return name_paypal_charges(account=account, rail=rail)


# One account lookup per unnamed key or app and run, every 15 minutes (rails migration 0011):
# credentials that will never say cost the provider four reads an hour.
ASKED_PER_RUN = 200
# PayPal captures read per site and run to name their charges. A capture of an earlier
# merchant is never shown to the app connected now, so it is read again each run while its
# charge is refundable: newest first, a site's new charges are named before those.
CAPTURES_PER_RUN = 50


@shared_task(name="rails.learn_payment_accounts")
def learn_payment_accounts_task() -> int:
    """Beat, every 15 minutes: ask Stripe and PayPal again which account each unnamed key or
    app acts on (:func:`unnamed_payment_accounts`), then name the PayPal charges that name
    none (:func:`name_paypal_charges`); how many accounts are named now. Until one is, its
    charges name no account and nothing is refused for it, as before Sill kept it."""
    named = [pk for pk in unnamed_payment_accounts() if learn_payment_account(account_pk=pk)]
    for pk in paypal_accounts_with_unnamed_charges():
        if pk not in named:  # named just now: its charges were read then
            name_paypal_charges_of(account_pk=pk)
    return len(named)
