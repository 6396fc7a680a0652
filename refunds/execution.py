"""Executing an approved refund on its rail: once, with one idempotency key, recoverable.

A refund in ``processing`` has its amount reserved on the charge. One attempt:

1. **Claim** a lease by conditional UPDATE. It returns a fresh *fencing token*; settling,
   failing, flagging and releasing all check that token under the refund's row lock, so a
   worker whose lease was taken over (it stalled past the lease, another worker claimed the
   refund) can no longer change it. A long rail call renews the lease while it waits.
2. **Look up first** when an earlier attempt may have reached the rail (``rail_attempted_at``
   is set, committed *before* every rail call that could move money): the rail is asked
   whether a refund exists for the idempotency key ``sill-refund-<refund id>``.
3. Otherwise **call the rail** with that same key.

The needs_attention rule (DESIGN.md): once an attempt may have reached the rail, the refund
never becomes ``failed`` and never releases its reservation until the rail has answered, for
that key, that no refund exists. A rail switched off (or a site connected to another account
than the charge's: a Shopify shop or WooCommerce store it switched away from), a key the rail
now rejects, a lookup that fails for good, or retries used up while the outcome is unknown all
lead to ``needs_attention``: still reserved, shown to owners and admins, asked about again by
the beat task, and resolvable only by the rail's answer or an owner's record of the provider's
dashboard (both in :mod:`refunds.reconcile.attention`).

Retries are bounded in attempts and in elapsed time (settings
``SILL_EXECUTION_MAX_ATTEMPTS`` and ``SILL_EXECUTION_MAX_SECONDS``); declines and other
permanent answers are never retried. The beat sweep (:func:`stuck_refund_ids`) re-enqueues a
processing refund whose lease lapsed, which covers a worker killed at any step.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.services import append_record
from refunds.credit_rail import credit_request, creditor_for
from refunds.models import Mandate, Refund, RefundStatus
from refunds.quote import RefundRefused, quote_refund
from refunds.services import (
    LeaseLost,
    SettlementExceedsCharge,
    fail_refund,
    flag_refund_for_attention,
    refund_body,
    settle_refund,
)
from sill.accounts.models import Agent, AgentKey
from sill.failpoints import failpoint
from sill.leases import lease_kept
from sill.rails.base import (
    AmbiguousRailError,
    CannotLookUp,
    RailError,
    RateLimited,
    RefundRequest,
    RefundResult,
    RetryableRailError,
)
from sill.rails.registry import RailDisabled, payment_account_unnamed, rail_for

logger = logging.getLogger(__name__)


class RetryLater(RailError):
    """This attempt ended without an answer; the task retries it (same key) after
    ``countdown`` seconds, the time also stamped on the refund (``next_check_at``) so that the
    recovery sweep leaves it to that retry until it is overdue.

    ``ambiguous``: the rail may have acted. Raised only while retries remain.
    """

    retryable = True

    def __init__(self, message: str, *, code: str, ambiguous: bool, countdown: float = 0.0) -> None:
        super().__init__(message, code=code)
        self.ambiguous = ambiguous
        self.countdown = countdown


def backoff_seconds(retries: int) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**retries)].

    Full jitter spreads the retries of many refunds hit by one rail outage, instead of
    sending them back together (AWS Architecture Blog, "Exponential Backoff And Jitter").
    """
    base = float(getattr(settings, "SILL_EXECUTION_BACKOFF_BASE_SECONDS", 2))
    cap = float(getattr(settings, "SILL_EXECUTION_BACKOFF_CAP_SECONDS", 300))
    return random.uniform(0, min(cap, base * 2**retries))


def lease_seconds() -> int:
    return int(getattr(settings, "SILL_EXECUTION_LEASE_SECONDS", 120))


def max_attempts() -> int:
    return int(getattr(settings, "SILL_EXECUTION_MAX_ATTEMPTS", 8))


def max_elapsed() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "SILL_EXECUTION_MAX_SECONDS", 3600)))


def attention_recheck() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "SILL_ATTENTION_RECHECK_SECONDS", 300)))


# --- the lease ------------------------------------------------------------------------------


def claim(refund_id: str, *, status: str = RefundStatus.PROCESSING) -> str | None:
    """Take the refund's lease if nobody holds it; the new fencing token, or None."""
    now = timezone.now()
    token = secrets.token_hex(16)
    claimed = (
        Refund.objects.filter(pk=refund_id, status=status)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(
            lease_until=now + timedelta(seconds=lease_seconds()),
            lease_token=token,
            attempts=F("attempts") + (1 if status == RefundStatus.PROCESSING else 0),
            first_attempt_at=Coalesce(F("first_attempt_at"), now),
            updated_at=now,
        )
    )
    return token if claimed == 1 else None


def renew(refund_id: str, token: str) -> bool:
    """Extend the lease; False when ``token`` no longer holds it."""
    now = timezone.now()
    return (
        Refund.objects.filter(pk=refund_id, lease_token=token)
        .exclude(lease_until__isnull=True)
        .update(lease_until=now + timedelta(seconds=lease_seconds()), updated_at=now)
        == 1
    )


def release(refund_id: str, token: str, *, retry_at: datetime | None = None) -> bool:
    """Give the lease back (the refund stays as it is); False on a stale token. ``retry_at``:
    when the task's retry is due (``next_check_at``: the sweep waits for it)."""
    return (
        Refund.objects.filter(pk=refund_id, lease_token=token).update(
            lease_until=None, next_check_at=retry_at, updated_at=timezone.now()
        )
        == 1
    )


def _mark_rail_attempted(refund_id: str, token: str) -> bool:
    """Commit, before the rail call, that this refund may from now on exist at the rail."""
    now = timezone.now()
    return (
        Refund.objects.filter(pk=refund_id, lease_token=token).update(
            rail_attempted_at=Coalesce(F("rail_attempted_at"), now), updated_at=now
        )
        == 1
    )


# --- one attempt ----------------------------------------------------------------------------


def refund_request(refund: Refund) -> RefundRequest:
    charge = refund.charge
    assert charge is not None
    return RefundRequest(
        refund_id=refund.id,
        idempotency_key=refund.idempotency_key,
        amount=refund.amount,
        provider_charge_id=charge.provider_charge_id,
        provider_payment_id=charge.provider_payment_id,
        metadata={"sill_refund_id": refund.id, "sill_order_id": refund.order_id or ""},
    )


def out_of_retries(refund: Refund, *, now: datetime | None = None) -> bool:
    now = now or timezone.now()
    started = refund.first_attempt_at or now
    return refund.attempts >= max_attempts() or now - started >= max_elapsed()


def execute_refund(refund_id: str) -> str:
    """Run one execution attempt; returns the outcome or raises :class:`RetryLater`.

    Outcomes: ``succeeded``, ``failed`` (the rail said nothing moved), ``needs_attention``,
    ``not-claimed`` (another execution holds it, or it is no longer processing) and
    ``lease-lost``.
    """
    token = claim(refund_id)
    if token is None:
        return "not-claimed"
    refund = Refund.objects.select_related("charge", "order", "site", "customer").get(pk=refund_id)
    try:
        return _attempt(refund, token)
    except LeaseLost:
        logger.warning(
            "refund %s of site %s: lease taken over; this attempt stops", refund_id, refund.site_id
        )
        return "lease-lost"


@dataclass(frozen=True)
class _RailCalls:
    """What one attempt asks the rail: a refund of a charge, or a customer-balance credit
    (``refunds.credit_rail``); the same key and the same lookup on every attempt."""

    rail: Callable[[], Any]
    find: Callable[[Any], RefundResult | None]
    call: Callable[[Any], RefundResult]
    # Refused before the call (a dispute opened since the decision, its agent deactivated or
    # its key revoked since its policy approved it): code and message.
    refusal: Callable[[], RefundRefused | None]


def agent_deactivated_refusal(refund: Refund) -> RefundRefused | None:
    """``agent_deactivated`` for an agent's refund or credit that no person decided (its
    policy approved it) when the agent has been deactivated since: nothing more leaves for
    a switched-off agent without a person's decision. One a person approved is theirs to
    send; reactivating the agent before the worker gets to it lets it go."""
    if refund.agent_id is None or refund.decided_by_id is not None:
        return None
    agent_id = (
        Agent.objects.filter(pk=refund.agent_id, active=False)
        .values_list("agent_id", flat=True)
        .first()
    )
    if agent_id is None:
        return None
    what = "credit" if refund.is_credit else "refund"
    return RefundRefused(
        f"Agent {agent_id} was deactivated before this {what} was sent: nothing was sent. "
        f"Make a new {what} from Sill if it is still owed.",
        code="agent_deactivated",
    )


def key_revoked_refusal(refund: Refund) -> RefundRefused | None:
    """``key_revoked`` for an agent's refund or credit that no person decided (its policy
    approved it) when the key that signed its mandate has been revoked since: a revoked key is
    one the merchant no longer trusts, and nothing it signed leaves without a person's
    decision. One a person approved is theirs to send (the held pages said the key was
    revoked)."""
    if refund.agent_id is None or refund.decided_by_id is not None or refund.mandate_id is None:
        return None
    revoked = (
        AgentKey.objects.filter(
            agent_id=refund.agent_id,
            key_id=Mandate.objects.filter(pk=refund.mandate_id).values("key_id")[:1],
            revoked_at__isnull=False,
        )
        .select_related("agent")
        .only("key_id", "agent__agent_id")
        .first()
    )
    if revoked is None:
        return None
    what = "credit" if refund.is_credit else "refund"
    return RefundRefused(
        f"The key {revoked.key_id} of {revoked.agent.agent_id} was revoked before this {what} "
        f"was sent: nothing was sent. Make a new {what} from Sill if it is still owed.",
        code="key_revoked",
    )


def _agent_refusal(refund: Refund) -> RefundRefused | None:
    """An agent's refund or credit no person decided that its agent or key no longer
    vouches for: the agent deactivated, or the key that signed it revoked, since."""
    return agent_deactivated_refusal(refund) or key_revoked_refusal(refund)


def _rail_calls(refund: Refund) -> _RailCalls:
    if refund.is_credit:
        credit = credit_request(refund)
        return _RailCalls(
            rail=lambda: creditor_for(refund.site_id),
            find=lambda rail: rail.find_credit(credit),
            call=lambda rail: rail.credit_customer(credit),
            # A credit draws on no charge: only its agent's switch and key may refuse it now.
            refusal=lambda: _agent_refusal(refund),
        )
    request = refund_request(refund)

    def refusal() -> RefundRefused | None:
        if (withdrawn := _agent_refusal(refund)) is not None:
            return withdrawn
        try:
            # A dispute opened after the decision: the bank is already moving this money.
            quote_refund(order=refund.order, charge=refund.charge, refund=refund)
        except RefundRefused as refused:
            return refused
        return None

    # A charge of a shop or store the site is no longer connected to (Shopify; WooCommerce,
    # paid on Stripe): its rail is refused (RailDisabled) before anything is asked, so nothing
    # goes to the shop connected now, nor to Stripe for an order no store of the site holds.
    taken_on = refund.charge.provider_account if refund.charge is not None else ""
    paid_on = refund.charge.payment_account if refund.charge is not None else ""

    def rail() -> Any:
        if refund.rail_attempted_at is not None:
            # An earlier attempt may have refunded on the charge's account: only a key of that
            # account can say so (another's "none" would fail a refund that was made).
            unnamed = payment_account_unnamed(
                site_id=refund.site_id, rail=refund.rail, payment_account=paid_on
            )
            if unnamed is not None:
                raise unnamed
        return rail_for(
            site_id=refund.site_id,
            rail=refund.rail,
            provider_account=taken_on,
            payment_account=paid_on,
        )

    return _RailCalls(
        rail=rail,
        find=lambda rail: rail.find_refund(request),
        call=lambda rail: rail.refund(request),
        refusal=refusal,
    )


def find_at_rail(refund: Refund) -> RefundResult | None:
    """Ask the rail for what an earlier attempt of ``refund`` made (by its key), if anything."""
    calls = _rail_calls(refund)
    return calls.find(calls.rail())


def _attempt(refund: Refund, token: str) -> str:
    calls = _rail_calls(refund)
    # Whether this refund may exist at the rail: an earlier attempt, or this one once called.
    reached = refund.rail_attempted_at is not None
    looking_up = reached
    unseen = False  # looked up, and the rail could not be asked
    # Whether a refund under the key may exist before this attempt's call: an earlier
    # attempt's, until the lookup below answers that there is none.
    in_doubt = reached
    try:
        failpoint("before_rail_call")
        rail = calls.rail()
        result: RefundResult | None = None
        if looking_up:
            try:
                result = calls.find(rail)
            except CannotLookUp:
                # No answer either way: the call below, under the same key, gets the rail to
                # answer with the refund it made, if it made one.
                unseen = True
            in_doubt = unseen
        looking_up = False
        if result is None and (refused := calls.refusal()) is not None:
            if unseen:
                # Neither failed (a refund may exist) nor sent (it must not be made now).
                return _attention(refund, token, code=refused.code, message=refused.message)
            # Safe to fail: nothing was ever sent, or the rail just said none exists.
            fail_refund(
                refund_id=refund.id, code=refused.code, message=refused.message, token=token
            )
            return "failed"
        if result is None:
            if not _mark_rail_attempted(refund.id, token):
                raise LeaseLost(refund.id)
            reached = True
            with lease_kept(
                lambda: renew(refund.id, token), seconds=lease_seconds(), name=f"lease-{refund.id}"
            ):
                result = calls.call(rail)
            failpoint("after_rail_call")
    except RailDisabled as exc:
        if not reached:
            fail_refund(refund_id=refund.id, code="rail_disabled", message=exc.message, token=token)
            return "failed"
        return _attention(refund, token, code="rail_disabled", message=exc.message)
    except RailError as exc:
        if exc.retryable:
            # A rate limit on the call says it did nothing: a refund may exist only if one
            # might before it. A 5xx promises less, and a lookup's error leaves an earlier
            # attempt's refund unknown.
            doubt = in_doubt if isinstance(exc, RateLimited) and not looking_up else reached
            return _retry_or_attention(refund, token, exc, may_have_acted=doubt)
        if looking_up or unseen:
            # The rail can't be asked (a rotated or restricted key), or was not, and refused
            # this call before it answered for the key (PayPal's 180 days, checked before
            # sending): an earlier attempt's refund may exist.
            return _attention(refund, token, code=exc.code, message=exc.message)
        # A permanent answer to the refund call itself: the rail refused it; nothing moved.
        fail_refund(refund_id=refund.id, code=exc.code, message=exc.message, token=token)
        return "failed"
    except LeaseLost:
        raise
    except Exception as exc:
        logger.exception(
            "refund %s of site %s: unexpected error during execution", refund.id, refund.site_id
        )
        message = f"unexpected error: {type(exc).__name__}: {exc}"
        error: RailError = (
            AmbiguousRailError(message)
            if reached
            else RetryableRailError(message, code="execution_error")
        )
        return _retry_or_attention(refund, token, error, may_have_acted=reached)
    return record_result(refund, token, result)


def record_result(refund: Refund, token: str, result: RefundResult) -> str:
    if result.state == "failed":
        fail_refund(
            refund_id=refund.id,
            code="rail_declined",
            message=result.failure_message or "the rail declined the refund",
            token=token,
        )
        return "failed"
    if result.state == "pending":
        error = RetryableRailError(
            f"the rail accepted the refund ({result.provider_refund_id}) and has not finished it",
            code="rail_pending",
        )
        return _retry_or_attention(refund, token, error, may_have_acted=True)
    try:
        settle_refund(
            refund_id=refund.id, provider_refund_id=result.provider_refund_id, token=token
        )
    except LeaseLost:
        # Never drop a success silently: the record names the provider's refund, and the
        # execution now holding the lease finds it through the lookup (same key).
        _record_lease_lost(refund, result)
        return "lease-lost"
    except SettlementExceedsCharge as exc:
        # The rail made it, but the books count the charge refunded already (an outside refund
        # reported meanwhile): asking again would get the same answer. A person compares the
        # books with the rail's now; the lookup goes on, and records it once they leave room.
        return _attention(
            refund,
            token,
            code=exc.code,
            message=exc.message,
            provider_refund_id=result.provider_refund_id,
        )
    except Exception as exc:
        # The rail confirmed the refund but Sill could not record it (the settlement rolled
        # back): never lost, never failed.
        logger.exception(
            "refund %s of site %s: settling %s failed",
            refund.id, refund.site_id, result.provider_refund_id,
        )  # fmt: skip
        unrecorded = AmbiguousRailError(
            f"the rail confirmed {result.provider_refund_id} but Sill could not record it: "
            f"{type(exc).__name__}: {exc}"
        )
        return _retry_or_attention(refund, token, unrecorded, may_have_acted=True)
    return "succeeded"


def _retry_or_attention(refund: Refund, token: str, exc: RailError, *, may_have_acted: bool) -> str:
    """Retry ``refund`` later, or, out of retries, settle what is known: needs attention
    while the rail may have made it (``may_have_acted``, or an ambiguous ``exc``); failed when
    the rail said it did nothing (every attempt rate limited, say: each retry's lookup found
    no refund under the key, and the call was refused), so nothing stays reserved and the
    failure says nothing moved."""
    refund.refresh_from_db(fields=["attempts", "first_attempt_at"])
    if out_of_retries(refund):
        tries = f"{refund.attempts} attempt{'' if refund.attempts == 1 else 's'}"
        message = f"gave up after {tries}: {exc.message}"
        if not (may_have_acted or exc.ambiguous):
            fail_refund(refund_id=refund.id, code=exc.code, message=message, token=token)
            return "failed"
        return _attention(refund, token, code=exc.code, message=message)
    # The refund's own count of attempts, not the task's: a re-enqueued refund backs off
    # from where it was.
    countdown = backoff_seconds(max(refund.attempts - 1, 0))
    if exc.retry_after:
        # Never sooner than the rail asked (a throttle): an earlier retry would only be
        # throttled again and spend an attempt. Capped like the backoff.
        cap = float(getattr(settings, "SILL_EXECUTION_BACKOFF_CAP_SECONDS", 300))
        countdown = max(countdown, min(exc.retry_after, cap))
    if not release(refund.id, token, retry_at=timezone.now() + timedelta(seconds=countdown)):
        raise LeaseLost(refund.id)
    raise RetryLater(
        exc.message,
        code=exc.code,
        ambiguous=exc.ambiguous or may_have_acted,
        countdown=countdown,
    )


def _attention(
    refund: Refund, token: str, *, code: str, message: str, provider_refund_id: str = ""
) -> str:
    flag_refund_for_attention(
        refund_id=refund.id,
        token=token,
        code=code,
        message=message,
        next_check_at=timezone.now() + attention_recheck(),
        provider_refund_id=provider_refund_id,
    )
    return "needs_attention"


def _record_lease_lost(refund: Refund, result: RefundResult) -> None:
    logger.warning(
        "refund %s of site %s: the rail confirmed %s after this worker lost its lease",
        refund.id,
        refund.site_id,
        result.provider_refund_id,
    )
    with transaction.atomic():
        append_record(
            site=refund.site,
            kind="lease_lost",
            body=refund_body(
                refund,
                provider_refund_id=result.provider_refund_id,
                rail_state=result.state,
                observed_at=timezone.now().isoformat(),
            ),
        )


# --- what the beat tasks pick up --------------------------------------------------------------


def stuck_refund_ids(*, older_than: timedelta) -> list[str]:
    """Processing refunds no execution holds, untouched for ``older_than``, and not waiting
    for a retry the task scheduled (``next_check_at``) unless it is overdue by as much: the
    sweep recovers a lost retry, it does not run one early beside the task's own (which would
    spend the refund's attempts twice as fast and cut its backoff short)."""
    now = timezone.now()
    due = now - older_than
    return list(
        Refund.objects.filter(status=RefundStatus.PROCESSING, updated_at__lt=due)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .filter(Q(next_check_at__isnull=True) | Q(next_check_at__lt=due))
        .values_list("id", flat=True)[:500]
    )
