"""Charging an agent's purchase on the site's rail: one attempt, its outcome, the sweep.

Charging follows the discipline of refund execution (``refunds.execution``). One attempt:

1. **Claim** the pending charge's lease by conditional UPDATE; the claim returns a fresh
   *fencing token*. Recording a success or a failure, flagging and releasing all check that
   token under the order's and the charge's row locks, so a worker whose lease lapsed and was
   taken over can no longer change the charge. A success such a worker saw is not dropped
   silently: it writes a signed ``lease_lost`` record, and the new holder settles the charge
   through the lookup below. A slow rail call renews the lease while it waits
   (``sill.leases``, as refund executions do).
2. **Look up first** when an earlier attempt may have reached the rail
   (``Charge.rail_attempted_at``, committed *before* every rail call): ``find_charge`` for
   the idempotency key ``sill-charge-<order id>``.
3. Otherwise **charge** with that same key.

A decline fails the charge and cancels the order in one transaction, with a signed ``charge``
record; a success records the charge, marks the order paid and writes its ``charge`` record
in one transaction. A payment the rail has not finished (Stripe ``processing`` or
``requires_action``: the buyer may be charged), a timeout, a lost answer, a rail switched off
after an attempt, and any exception that is not a rail error leave the charge pending; it is
tried again after an exponential backoff with full jitter, and every later attempt looks the
charge up before charging again.

Attempts are bounded (``SILL_CHARGE_MAX_ATTEMPTS``). The last one that ends without an
answer leaves the charge pending with ``attention_since`` set and a signed
``needs_attention`` record: never failed while the rail may have charged the buyer. From then
on the charge is only looked up, never charged again, by the sweep every
``SILL_CHARGE_ATTENTION_RECHECK_SECONDS``: it succeeds when the rail shows the charge, fails
(and the order is cancelled) when the rail answers that nothing was charged, and otherwise
stays as it is for a person to resolve: an owner records what the rail's dashboard shows
(``sill.orders.charge_attention``). The site's owners are emailed once, on the commit that first
flags it (``orders.notify_attention``).

The sweep (``sill.orders.tasks.recover_stuck_charges``, beat every minute) re-enqueues a
pending charge whose lease lapsed (a worker killed at any step), whose retry is long overdue
(a lost task message), or whose attention check is due. The lease itself:
``sill.orders.charge_lease``.
"""

from __future__ import annotations

import logging
import random
import threading
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.activity import purchase_approval_of
from audit.services import append_record
from sill.failpoints import failpoint
from sill.leases import lease_kept
from sill.orders.charge_lease import (
    ChargeLeaseLost,
    claim_charge,
    lease_seconds,
    locked_for_update,
    mark_rail_attempted,
    release_charge,
    renew_charge,
)
from sill.orders.models import Charge, ChargeStatus, Customer, Order, OrderStatus
from sill.orders.services import record_charge_result, set_order_status
from sill.queue import enqueue_on_commit
from sill.rails.base import (
    ChargeFinder,
    ChargePending,
    ChargeRequest,
    ChargeResult,
    RailError,
)
from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    payment_account_moved,
    rail_account_for,
    rail_from_account,
)

logger = logging.getLogger(__name__)


# --- settings -------------------------------------------------------------------------------


def max_attempts() -> int:
    return int(getattr(settings, "SILL_CHARGE_MAX_ATTEMPTS", 8))


def attention_recheck() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "SILL_CHARGE_ATTENTION_RECHECK_SECONDS", 900)))


def backoff_seconds(attempt: int) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))].

    Full jitter spreads the retries of many charges hit by one rail outage instead of sending
    them back together (AWS Architecture Blog, "Exponential Backoff And Jitter").
    """
    base = float(getattr(settings, "SILL_CHARGE_BACKOFF_BASE_SECONDS", 2))
    cap = float(getattr(settings, "SILL_CHARGE_BACKOFF_CAP_SECONDS", 300))
    return random.uniform(0, min(cap, base * 2 ** max(attempt - 1, 0)))


class ChargeRetry(Exception):
    """This attempt ended without an outcome: run the task again after ``countdown`` seconds.

    Raised only while attempts remain; the lease was released and ``next_check_at`` set.
    """

    def __init__(self, message: str, *, countdown: float) -> None:
        super().__init__(message)
        self.countdown = countdown


# --- one attempt ----------------------------------------------------------------------------


def charge_request(charge: Charge, payment_method: str) -> ChargeRequest:
    order = charge.order
    return ChargeRequest(
        order_id=order.id,
        amount=charge.amount,
        payment_method=payment_method,
        idempotency_key=f"sill-charge-{order.id}",
        customer_email=order.buyer_email,
        description=f"Order {order.number}",
    )


def charge_order(*, order_id: str, payment_method: str = "") -> str:
    """Run one attempt at the order's pending charge; returns the outcome or raises
    :class:`ChargeRetry`.

    Outcomes: ``succeeded``, ``failed`` (the order is cancelled), ``needs_attention``,
    ``done`` (nothing pending), ``not-claimed`` (another execution holds it) and
    ``lease-lost``.
    """
    pending = (
        Charge.objects.filter(order_id=order_id, status=ChargeStatus.PENDING)
        .order_by("created_at")
        .values_list("pk", flat=True)
        .first()
    )
    if pending is None:
        return "done"
    token = claim_charge(pending)
    if token is None:
        return "not-claimed"
    charge = Charge.objects.select_related("order").get(pk=pending)
    method = charge.payment_method or payment_method
    try:
        try:
            return _attempt(charge, token, charge_request(charge, method))
        except (ChargeLeaseLost, ChargeRetry):
            raise
        except Exception:
            # Not a rail error: a bug, or the database failing while the result was recorded.
            # If the rail may have been called the outcome is ambiguous; the next attempt
            # looks the charge up first (rail_attempted_at was committed before the call).
            logger.exception("charge %s: attempt %s failed", charge.pk, charge.attempts)
            return _later(charge, token, reason="the attempt failed unexpectedly")
    except ChargeLeaseLost:
        logger.warning("charge %s: lease taken over; this attempt stops", charge.pk)
        return "lease-lost"


def _attempt(charge: Charge, token: str, request: ChargeRequest) -> str:
    # Past the last attempt the charge is only looked up, never charged again.
    lookup_only = charge.attempts > max_attempts()
    # Whether a charge may exist at the rail: an earlier attempt reached it, and the rail has
    # not answered (in this attempt, for the idempotency key) that nothing was charged.
    reached = charge.rail_attempted_at is not None
    may_exist = reached
    looking_up = False
    try:
        account = rail_account_for(site_id=charge.order.site_id, rail=charge.rail)
        rail = rail_from_account(account)
        if reached and (elsewhere := _tried_elsewhere(charge, account)):
            # The key now acts on another account (or mode), which holds nothing of the
            # earlier attempt: its lookup would answer "no charge", and a charge there would
            # take the buyer's money a second time. Only the first account can answer.
            return _later(charge, token, reason=elsewhere)
        result: ChargeResult | None = None
        if reached:
            if isinstance(rail, ChargeFinder):
                looking_up = True
                with _lease_kept(charge, token):
                    result = rail.find_charge(request)
                looking_up = False
                may_exist = result is not None
                if result is None and lookup_only:
                    return _fail(
                        charge,
                        token,
                        code="not_charged",
                        message="the rail holds no charge for this order; Sill stopped trying",
                    )
            elif lookup_only:
                return _flag(charge, token, reason="the rail cannot be asked about this charge")
        if result is None:
            if lookup_only and not reached:
                return _fail(
                    charge,
                    token,
                    code="not_attempted",
                    message="no attempt reached the rail; Sill stopped trying",
                )
            if not mark_rail_attempted(charge.pk, token, payment_account=account.payment_account):
                raise ChargeLeaseLost(charge.pk)
            reached = True
            failpoint("before_charge_call")
            with _lease_kept(charge, token):
                result = rail.charge(request)
            failpoint("after_charge_call")
    except RailDisabled as exc:
        if not reached:
            return _fail(charge, token, code="rail_disabled", message=exc.message)
        # An earlier attempt may have charged the buyer: never fail without the rail's word.
        return _later(charge, token, reason=f"the rail is switched off: {exc.message}")
    except ChargePending as exc:
        return _later(
            charge,
            token,
            reason=str(exc),
            provider_payment_id=exc.provider_payment_id,
            rail_status=exc.provider_status,
        )
    except RailError as exc:
        if exc.retryable or looking_up or may_exist:
            # A lookup that fails, even for good (a revoked key), says nothing about the buyer;
            # nor does a refusal from a rail that could not be asked whether it charged.
            return _later(charge, token, reason=exc.message)
        return _fail(charge, token, code=exc.code, message=exc.message)
    # The account the key that charged acts on, read with it (the same row): the charge's money
    # is there, whatever key the site holds later (sill.rails.payment_account).
    return _succeed(charge, token, result, payment_account=account.payment_account)


def _lease_kept(charge: Charge, token: str) -> AbstractContextManager[threading.Event]:
    """The lease renewed while a rail call runs: a slow call outlasting it would otherwise
    let the sweep start a second attempt (and spend one of the charge's attempts) while this
    one is alive. A renewal refused stops renewing; this attempt's writes are then fenced."""
    return lease_kept(
        lambda: renew_charge(charge.pk, token), seconds=lease_seconds(), name=f"lease-{charge.pk}"
    )


def _tried_elsewhere(charge: Charge, account: RailAccount) -> str:
    """Why the charge may not be looked up or charged with ``account``'s key: an earlier
    attempt went to another payment account than the one it acts on now
    (:func:`sill.rails.registry.payment_account_moved`'s rule), or to a known one while the
    key now held is not named yet (it was replaced since, and may be another account's, whose
    "no such charge" would charge the buyer again). "" when it may."""
    if not charge.payment_account:
        return ""
    if not account.payment_account:
        return (
            f"the charge was first tried on the Stripe account {charge.payment_account}, and "
            "Stripe has not said which account the site's key acts on now: Sill waits for it "
            "rather than ask a key that may not see that attempt"
        )
    if (
        payment_account_moved(
            rail=charge.rail, payment_account=charge.payment_account, account=account
        )
        is None
    ):
        return ""
    return (
        f"the charge was first tried on the Stripe account {charge.payment_account}, and the "
        f"site's key now acts on {account.payment_account}, which cannot say whether the "
        "buyer was charged: look it up in the first account's dashboard"
    )


def _later(charge: Charge, token: str, *, reason: str, **fields: Any) -> str:
    """No outcome this time: retry after a backoff, or past the last attempt, stop retrying."""
    if charge.attempts < max_attempts():
        countdown = backoff_seconds(charge.attempts)
        next_check = timezone.now() + timedelta(seconds=countdown)
        if not release_charge(charge.pk, token, next_check_at=next_check, **fields):
            raise ChargeLeaseLost(charge.pk)
        raise ChargeRetry(reason, countdown=countdown)
    reached = Charge.objects.filter(pk=charge.pk, rail_attempted_at__isnull=False).exists()
    if not reached:
        return _fail(charge, token, code="not_attempted", message=reason)
    return _flag(charge, token, reason=reason, **fields)


# --- the outcomes, each in one transaction with its audit record ---------------------------


def _succeed(charge: Charge, token: str, result: ChargeResult, *, payment_account: str) -> str:
    with transaction.atomic():
        order, locked, holds = locked_for_update(charge.pk, token)
        if holds:
            failpoint("in_charge_settlement")
            settle_charge(
                order=order,
                charge=locked,
                succeeded=True,
                provider_payment_id=result.provider_payment_id,
                provider_charge_id=result.provider_charge_id,
                captured_at=result.captured_at or timezone.now(),
            )
            if payment_account:  # unknown now: the account its first attempt named stays
                Charge.objects.filter(pk=locked.pk).update(payment_account=payment_account)
                locked.payment_account = payment_account  # as its record names it
            append_record(
                site=order.site,
                kind="charge",
                body=charge_body(order, locked, outcome="succeeded", result=result),
            )
        elif not (
            locked.status == ChargeStatus.SUCCEEDED
            and locked.provider_payment_id == result.provider_payment_id
        ):
            # The rail charged the buyer and another execution holds the charge now: it
            # settles through its lookup. This record keeps what this worker saw (it commits,
            # so no raise inside the block).
            append_record(
                site=order.site,
                kind="lease_lost",
                body=charge_body(order, locked, outcome="succeeded", result=result),
            )
    if not holds:
        logger.warning("charge %s: lease taken over after the rail charged", charge.pk)
        return "lease-lost"
    if result.provider_customer_id and order.customer_id:
        Customer.objects.filter(pk=order.customer_id, rail_customer_id="").update(
            rail_customer_id=result.provider_customer_id
        )
    return "succeeded"


def _fail(charge: Charge, token: str, *, code: str, message: str) -> str:
    """The rail answered that nothing was charged: fail the charge and cancel the order."""
    with transaction.atomic():
        order, locked, holds = locked_for_update(charge.pk, token)
        if not holds:
            raise ChargeLeaseLost(charge.pk)
        settle_charge(
            order=order,
            charge=locked,
            succeeded=False,
            provider_payment_id=locked.provider_payment_id,
            failure_message=message,
        )
        append_record(
            site=order.site,
            kind="charge",
            body=charge_body(order, locked, outcome="failed", code=code, message=message[:500]),
        )
    return "failed"


def settle_charge(
    *,
    order: Order,
    charge: Charge,
    succeeded: bool,
    provider_payment_id: str,
    provider_charge_id: str = "",
    captured_at: datetime | None = None,
    failure_message: str = "",
) -> Charge:
    """Settle the pending charge whose order and row the caller holds locked (inside its
    ``atomic()``, before its audit append): succeeded, the order is paid; failed, the order is
    cancelled. Either way the lease and the next check are cleared: nothing tries it again."""
    settled = record_charge_result(
        charge=charge,
        succeeded=succeeded,
        provider_payment_id=provider_payment_id,
        provider_charge_id=provider_charge_id,
        captured_at=captured_at,
        failure_message=failure_message,
    )
    Charge.objects.filter(pk=charge.pk).update(lease_until=None, next_check_at=None)
    settled.lease_until = settled.next_check_at = None
    if not succeeded:
        set_order_status(order=order, status=OrderStatus.CANCELLED)
    return settled


def _flag(charge: Charge, token: str, *, reason: str, **fields: Any) -> str:
    """Stop retrying: the charge stays pending, needs attention, and is looked up later."""
    now = timezone.now()
    with transaction.atomic():
        order, locked, holds = locked_for_update(charge.pk, token)
        if not holds:
            raise ChargeLeaseLost(charge.pk)
        first_time = locked.attention_since is None
        Charge.objects.filter(pk=locked.pk).update(
            lease_until=None,
            next_check_at=now + attention_recheck(),
            attention_since=locked.attention_since or now,
            attention_reason=reason[:300],
            **fields,
        )
        if first_time:
            locked.refresh_from_db()
            append_record(
                site=order.site,
                kind="needs_attention",
                body=charge_body(order, locked, outcome="needs_attention", message=reason[:300]),
            )
            # By name: the tasks module imports this one (sill.queue).
            enqueue_on_commit(
                "orders.notify_attention", locked.pk, recovered_by="orders.recover_stuck"
            )
    return "needs_attention"


def charge_body(
    order: Order,
    charge: Charge,
    *,
    outcome: str,
    result: ChargeResult | None = None,
    code: str = "",
    message: str = "",
) -> dict[str, Any]:
    """The audit body of a charge event: integers and strings only (exact amounts).

    ``payment_account``: the account at the provider the charge was taken (or tried) on, as
    the charge row keeps it (blank: not known, as for the mock rail), so the log alone says
    where the buyer's money is after the site's key is replaced."""
    return {
        # The decision it follows from, as a refund's settlement names its decision.
        "decision_hash": purchase_decision_hash(order),
        "order_id": order.id,
        "order_number": order.number,
        "charge_id": charge.id,
        "mandate_id": order.source_mandate_id,
        "amount_minor": charge.amount_minor,
        "currency": charge.currency,
        "rail": charge.rail,
        "payment_account": charge.payment_account,
        "provider_payment_id": result.provider_payment_id if result else charge.provider_payment_id,
        "provider_charge_id": result.provider_charge_id if result else charge.provider_charge_id,
        "rail_status": charge.rail_status,
        "outcome": outcome,
        "code": code,
        "message": message,
        "attempts": charge.attempts,
    }


def purchase_decision_hash(order: Order) -> str | None:
    """The hash of the signed ``approved`` record of the purchase that placed ``order``
    (``refunds.services.record_purchase_decision``, committed with the order and its charge);
    None for an order placed before purchases had one. Any other approval about the order that
    names no refund is not the decision this charge follows from
    (:func:`audit.activity.purchase_approval_of` reads the body's ``"kind": "purchase"``)."""
    record = purchase_approval_of(order)
    return record.hash if record is not None else None


# --- the recovery sweep ---------------------------------------------------------------------


def stuck_charge_order_ids(*, older_than: timedelta, now: datetime | None = None) -> list[str]:
    """Orders whose pending charge no execution holds and that nothing else will retry soon:
    a lapsed lease, a retry overdue by ``older_than``, never tried, or an attention check due.
    """
    now = now or timezone.now()
    due = now - older_than
    free = Q(lease_until__isnull=True) & (
        Q(next_check_at__isnull=True)
        | Q(next_check_at__lt=due)
        | Q(attention_since__isnull=False, next_check_at__lte=now)
    )
    return list(
        Charge.objects.filter(status=ChargeStatus.PENDING, created_at__lt=due)
        .filter(Q(lease_until__lt=now) | free)
        .order_by("created_at")
        .values_list("order_id", flat=True)[:500]
    )
