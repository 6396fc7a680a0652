"""Reconciliation runs: which rail accounts and charges are compared with the rail, and when.

The beat task ``refunds.reconcile`` ticks every five minutes and starts a run for each
enabled rail account whose rail can list a charge's refunds (``ChargeReader``: Stripe,
PayPal and Shopify; the mock rail's "provider database" is Sill's own records, so there is
nothing to compare) and whose last run started ``SILL_RECONCILE_EVERY_MINUTES`` (60) ago or
more. A run checks the charges with activity in the last ``SILL_RECONCILE_DAYS`` (7) —
created, captured, refunded by Sill or outside it — plus every charge that still has an open
item (so it can clear), at most ``SILL_RECONCILE_MAX_CHARGES`` (500) per run, going on from
where the previous run stopped, so a busy site is covered in turns. A charge of a Shopify shop
the site switched away from (``Charge.provider_account``) is left out until that shop is
connected again: only its token could read it, and the shop connected holds no such order
(asked, it only ever counted the charge unreadable). A Stripe charge of a WooCommerce store
the site switched away from is checked like any other: the payment is still on the Stripe
account, and a refund made in Stripe's dashboard or a dispute of it must still be recorded,
though Sill refunds it nowhere (sill.rails.registry.readable_with_connected_account).

On a rail that credits customer balances (Stripe), a run then compares the credits of each
customer with a credit changed in the same days, or an open credit item, with the balance
transactions Stripe lists for that customer (as many customers as charges, in turns too).

Each charge is read outside any transaction (a network call), and a ``RailError`` on one
charge is logged and counted while the run goes on. Nothing here starts a money movement.

A run stops between charges (and customers) once it has run ``SILL_RECONCILE_MAX_SECONDS``,
well inside the task's soft time limit, and finishes marked ``out_of_time``: the next run goes
on from its cursor. Should one charge's read outlast even the soft limit, the
``SoftTimeLimitExceeded`` it raises (the Stripe SDK wraps it in a connection error) ends the
run the same way, that charge left for the next run, never counted as one that failed: caught
as a failed charge, the run would go on reading until the hard limit killed it.

A run writes its progress (counters, cursors, ``progress_at``) after each charge and customer.
A worker that dies mid-run (killed, restarted, past the task's time limit) leaves its run
unfinished: once it is silent for ``RUN_STOPPED_AFTER`` the page shows it stopped, and the next
run (due, as always, an interval after the stopped one started) goes on from where it got to,
not from the last finished run's place: a run that is killed each time at the same point would
otherwise check the same first charges again and again, and never the others.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from refunds.credit_rail import CREDIT_RAIL
from refunds.models import ReconciliationItem, ReconciliationRun, Refund, RefundKind
from refunds.reconcile.inbox import reconcile_charge, reconcile_customer_credits
from sill.orders.models import Charge, ChargeStatus, Customer, ExternalRefund
from sill.rails.base import ChargeReader, CreditReader, RailError
from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    rail_from_account,
    readable_with_connected_account,
)

logger = logging.getLogger(__name__)


# Rail refund states that may still change (sill.orders.outside.COUNTED_STATES less
# ``succeeded``).
NOT_FINAL = ("pending", "requires_action")


def reconcile_days() -> int:
    return max(1, int(getattr(settings, "SILL_RECONCILE_DAYS", 7)))


def run_interval() -> timedelta:
    return timedelta(minutes=max(1, int(getattr(settings, "SILL_RECONCILE_EVERY_MINUTES", 60))))


def max_charges() -> int:
    return max(1, int(getattr(settings, "SILL_RECONCILE_MAX_CHARGES", 500)))


def max_seconds() -> float:
    return max(0, int(getattr(settings, "SILL_RECONCILE_MAX_SECONDS", 150)))


def _past_soft_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is the task's soft time limit, raised in the middle of a rail read
    (where an SDK may have wrapped it: Stripe's turns it into a connection error)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, SoftTimeLimitExceeded):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def accounts_due(*, now: datetime | None = None) -> list[int]:
    """The rail accounts whose run is due (their rail can list refunds, or cannot be built:
    a run then records why, once per interval, for the inbox to show)."""
    now = now or timezone.now()
    due = []
    for account in RailAccount.objects.filter(enabled=True).order_by("pk"):
        try:
            if not isinstance(rail_from_account(account), ChargeReader):
                continue
        except RailDisabled:
            pass
        last = _last_run(account).first()
        if last is None or last.started_at <= now - run_interval():
            due.append(account.pk)
    return due


def run_reconciliation(
    *, account_id: int, now: datetime | None = None, force: bool = False
) -> ReconciliationRun | None:
    """One run over one rail account; None when it is not due (``force`` skips that check),
    switched off, or its rail cannot list refunds."""
    now = now or timezone.now()
    account = RailAccount.objects.filter(pk=account_id, enabled=True).first()
    if account is None:
        return None
    try:
        rail = rail_from_account(account)
    except RailDisabled as exc:
        run = _claim(account, now=now, force=force)
        if run is not None:
            _finish(run, error=exc.message)
        return run
    if not isinstance(rail, ChargeReader):
        return None
    run = _claim(account, now=now, force=force)
    if run is None:
        return None
    # Where the last run that got anywhere stopped: finished, or stopped with progress written.
    previous = (
        _last_run(account)
        .exclude(pk=run.pk)
        .filter(Q(finished_at__isnull=False) | Q(progress_at__isnull=False))
        .first()
    )
    since = now - timedelta(days=reconcile_days())
    deadline = time.monotonic() + max_seconds()
    charges = charges_to_check(
        account,
        since=since,
        after=previous.cursor if previous is not None else "",
        limit=max_charges(),
    )
    for index, charge in enumerate(charges):
        if index and time.monotonic() >= deadline:
            run.out_of_time = True
            break
        try:
            outcome = reconcile_charge(charge=charge, rail=rail, event_id=f"reconcile:{run.pk}")
        except Exception as exc:
            if _past_soft_limit(exc):
                # This charge was not checked: the next run starts with it.
                logger.warning("reconciliation: stopped at the soft time limit, at %s", charge.pk)
                run.out_of_time = True
                break
            run.charges_unreadable += 1
            if isinstance(exc, RailError):
                logger.warning("reconciliation: charge %s could not be read: %s", charge.pk, exc)
            else:
                # A bug on one charge must not hide the others' differences.
                logger.exception("reconciliation: charge %s failed", charge.pk)
        else:
            run.items_opened += outcome.opened
            run.items_cleared += outcome.cleared
        run.charges_checked += 1
        run.cursor = charge.pk
        _progress(run)
    if not run.out_of_time and isinstance(rail, CreditReader) and account.rail == CREDIT_RAIL:
        _check_credits(run, account, rail, since=since, previous=previous, deadline=deadline)
    _finish(run)
    return run


def _check_credits(
    run: ReconciliationRun,
    account: RailAccount,
    rail: CreditReader,
    *,
    since: datetime,
    previous: ReconciliationRun | None,
    deadline: float,
) -> None:
    """Compare the credits of the customers due with the rail's balance transactions, until
    ``deadline`` (``time.monotonic()``) or the soft time limit, as the charges."""
    customers = customers_to_check(
        account,
        since=since,
        after=previous.customer_cursor if previous is not None else None,
        limit=max_charges(),
    )
    for index, customer in enumerate(customers):
        if index and time.monotonic() >= deadline:
            run.out_of_time = True
            return
        try:
            outcome = reconcile_customer_credits(customer=customer, rail=rail, since=since)
        except Exception as exc:
            if _past_soft_limit(exc):
                logger.warning(
                    "reconciliation: stopped at the soft time limit, at customer %s", customer.pk
                )
                run.out_of_time = True
                return
            run.customers_unreadable += 1
            if isinstance(exc, RailError):
                logger.warning(
                    "reconciliation: credits of customer %s unreadable: %s", customer.pk, exc
                )
            else:
                logger.exception("reconciliation: credits of customer %s failed", customer.pk)
        else:
            run.items_opened += outcome.opened
            run.items_cleared += outcome.cleared
        run.customers_checked += 1
        run.customer_cursor = customer.pk
        _progress(run)


def customers_to_check(
    account: RailAccount, *, since: datetime, after: int | None, limit: int
) -> list[Customer]:
    """The site's customers with a credit changed since ``since`` or an open credit item, in
    id order from just after ``after``, wrapping round (as :func:`charges_to_check`)."""
    changed = Refund.objects.filter(
        customer=OuterRef("pk"), kind=RefundKind.CUSTOMER_CREDIT, updated_at__gte=since
    )
    still_open = ReconciliationItem.objects.filter(
        customer=OuterRef("pk"), resolved_at__isnull=True
    )
    due = (
        Customer.objects.filter(site_id=account.site_id)
        .exclude(rail_customer_id="")
        .filter(Exists(changed) | Exists(still_open))
        .select_related("site")
        .order_by("pk")
    )
    first = list(due.filter(pk__gt=after or 0)[:limit])
    if len(first) < limit and after:
        first += list(due.filter(pk__lte=after)[: limit - len(first)])
    return first


def charges_to_check(
    account: RailAccount, *, since: datetime, after: str, limit: int
) -> list[Charge]:
    """The account's active charges, in id order from just after ``after``, wrapping round."""
    active = _active_charges(account, since=since)
    first = list(active.filter(pk__gt=after).order_by("pk")[:limit])
    if len(first) < limit and after:
        first += list(active.filter(pk__lte=after).order_by("pk")[: limit - len(first)])
    return first


def _active_charges(account: RailAccount, *, since: datetime) -> QuerySet[Charge]:
    refunded = Refund.objects.filter(charge=OuterRef("pk"), updated_at__gte=since)
    # An outside refund still pending may settle or fail weeks later: its charge is read
    # until it is final, however old, so a missed webhook of its end is made up for.
    outside = ExternalRefund.objects.filter(charge=OuterRef("pk")).filter(
        Q(recorded_at__gte=since) | Q(rail_updated_at__gte=since) | Q(status__in=NOT_FINAL)
    )
    still_open = ReconciliationItem.objects.filter(charge=OuterRef("pk"), resolved_at__isnull=True)
    return (
        Charge.objects.filter(
            order__site_id=account.site_id, rail=account.rail, status=ChargeStatus.SUCCEEDED
        )
        .exclude(provider_charge_id="")
        # Not a charge the account cannot be asked about: an earlier Shopify shop's (its
        # token is gone). An earlier Woo store's Stripe charge is read like any other.
        .filter(readable_with_connected_account(site_id=account.site_id, rail=account.rail))
        .filter(
            Q(created_at__gte=since)
            | Q(captured_at__gte=since)
            | Exists(refunded)
            | Exists(outside)
            | Exists(still_open)
        )
        .select_related("order__site")
    )


def _last_run(account: RailAccount) -> QuerySet[ReconciliationRun]:
    return ReconciliationRun.objects.filter(site_id=account.site_id, rail=account.rail).order_by(
        "-started_at", "-id"
    )


def _claim(account: RailAccount, *, now: datetime, force: bool) -> ReconciliationRun | None:
    """Start a run unless one started within the interval; the account's row lock makes two
    workers that look at once start one run between them."""
    with transaction.atomic():
        RailAccount.objects.select_for_update().filter(pk=account.pk).first()
        last = _last_run(account).first()
        if not force and last is not None and last.started_at > now - run_interval():
            return None
        return ReconciliationRun.objects.create(
            site_id=account.site_id, rail=account.rail, started_at=now
        )


_PROGRESS_FIELDS = (
    "charges_checked",
    "charges_unreadable",
    "customers_checked",
    "customers_unreadable",
    "items_opened",
    "items_cleared",
    "cursor",
    "customer_cursor",
)


def _progress(run: ReconciliationRun) -> None:
    """Write how far the run got: the page's sign of life, and where the next run goes on if
    this one's worker dies before it finishes."""
    run.progress_at = timezone.now()
    ReconciliationRun.objects.filter(pk=run.pk).update(
        progress_at=run.progress_at, **{name: getattr(run, name) for name in _PROGRESS_FIELDS}
    )


def _finish(run: ReconciliationRun, *, error: str = "") -> None:
    run.finished_at = timezone.now()
    run.error = error[:500]
    run.save()
