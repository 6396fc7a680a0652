"""Which Stripe account a site's key acts on (``RailAccount.payment_account``), and so which
account each charge's money is on (``Charge.payment_account``).

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
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from sill.orders.models import Rail
from sill.rails.models import RailAccount
from sill.rails.registry import RailDisabled, rail_from_account
from sill.rails.stripe import StripeRail

logger = logging.getLogger(__name__)


def learn_payment_account(*, account_pk: int) -> str:
    """Ask Stripe which account the site's Stripe key acts on and record it on the rail
    account; returns it (``""``: unknown). Recorded only while the key, mode, Connect account
    and address it was read with are still the stored ones: an answer about a key the
    merchant replaced meanwhile is never written over the new key's."""
    account = RailAccount.objects.filter(pk=account_pk, rail=Rail.STRIPE).first()
    if account is None or not account.has_secret:
        return ""
    try:
        rail_from_account(account)  # the refusals a refund would meet: live off, mode, no key
        named = StripeRail(
            secret_key=account.get_secret(),
            connected_account=account.connected_account,
            api_base=account.api_base,
            mode=account.mode,
            timeout=float(settings.SILL_RAIL_CHECK_TIMEOUT_SECONDS),
        ).payment_account()
    except RailDisabled as refused:
        logger.info("stripe account of site %s not read: %s", account.site_id, refused.code)
        return ""
    RailAccount.objects.filter(
        pk=account.pk,
        secret_encrypted=bytes(account.secret_encrypted),
        mode=account.mode,
        connected_account=account.connected_account,
        api_base=account.api_base,
    ).update(payment_account=named)
    logger.info("stripe account of site %s: %s", account.site_id, named or "not named")
    return named


# Registered in workers by sill.rails.tasks, which imports it; the settings service enqueues it
# by name, on commit (sill.queue).
@shared_task(name="rails.learn_payment_account")
def learn_payment_account_task(account_pk: int) -> str:
    return learn_payment_account(account_pk=account_pk)


def unnamed_stripe_accounts() -> list[int]:
    """The enabled Stripe accounts with a key whose account Stripe has not named: the lookup
    enqueued when the key was saved never ran (the broker was down), Stripe failed to answer
    it, or will not say (a restricted key); at most :data:`ASKED_PER_RUN`, oldest first."""
    return list(
        RailAccount.objects.filter(rail=Rail.STRIPE, enabled=True, payment_account="")
        .exclude(secret_encrypted=b"")
        .order_by("pk")
        .values_list("pk", flat=True)[:ASKED_PER_RUN]
    )


# One GET /v1/account per unnamed key and run, every 15 minutes (rails migration 0011): a key
# that will never say costs Stripe four reads an hour.
ASKED_PER_RUN = 200


@shared_task(name="rails.learn_payment_accounts")
def learn_payment_accounts_task() -> int:
    """Beat, every 15 minutes: ask Stripe again which account each unnamed key acts on
    (:func:`unnamed_stripe_accounts`); how many are named now. Until one is, its charges are
    recorded with no account and nothing is refused for it, as before Sill kept it."""
    return sum(1 for pk in unnamed_stripe_accounts() if learn_payment_account(account_pk=pk))
