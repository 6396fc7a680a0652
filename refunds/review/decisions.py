"""Deciding held refunds: approve, reject, and the 24-hour expiry.

A held refund (status ``held``, decision ``escalated``) leaves that state exactly once. Every
way out — an approval, a rejection, the expiry — first locks the refund row
(``select_for_update``) and reads its status again, so when two admins decide at the same
moment the second one waits for the first, finds the refund decided and gets
:class:`AlreadyDecided` instead of a second outcome.

An approval first catches up with the rail, outside any transaction (its network calls hold
no lock): a dispute or a refund made outside Sill that the rail reports and Sill had missed
(its webhook never came) is recorded, and opens its Reconciliation item, as at the refund's
own decision. It then locks the order and its charge (in the order refund → order → charge
that settlement uses too, so the two never deadlock) and checks the facts again: a refund held
yesterday is never paid on today's stale approval if the charge has since been disputed, or
refunded elsewhere so that less than the held amount remains, or if the site is now connected
to another account than the charge's (a Shopify shop or WooCommerce store it switched away
from), or its rail is switched off or its stored API key can no longer be read (the refund
would only fail at execution). Such an approval is refused and the refund closed with the
reason (``disputed``, ``exceeds_refundable``, ``rail_disabled``); an approval after
``expires_at`` expires the refund on the spot. Nothing is sent to the rail then. A held
customer credit draws on no charge: what is checked again is its rail alone (switched off, or
its stored key unreadable, closes it ``rail_disabled`` the same way).

Each outcome writes its decision record in the same transaction, linking the ``escalated``
record it resolves (``escalated_hash``): ``escalated_approved`` names the reviewer and
becomes the refund's ``decision_hash`` (the settlement links to it); ``escalated_rejected``
carries the reason (``rejected_by_reviewer``, ``expired``, ``disputed``,
``exceeds_refundable``, ``rail_disabled``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import append_record
from policies.facts import prefetch_rail_facts
from refunds.credit_rail import CREDIT_RAIL
from refunds.labels import deadline_text, money_words, refused_approval
from refunds.locks import lock_decision_scope, retry_on_conflict
from refunds.models import DecidedVia, Decision, Refund, RefundStatus
from refunds.quote import Quote, RefundRefused, quote_refund
from refunds.reconcile.inbox import catch_up_charge
from refunds.services import HOLD_FOR, enqueue_execution, refund_body, reserve, transition
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Membership
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.rails.registry import RailDisabled, usable_rail_account

NOTE_MAX_LENGTH = 2000


class AlreadyDecided(SillError):
    """Someone (or the expiry) decided this refund first."""

    code = "already_decided"
    status = 409


class RequesterCannotApprove(SillError):
    """Four eyes: whoever asked for a refund never approves it."""

    code = "requester_cannot_approve"
    status = 403


class DecisionRefused(SillError):
    """The decision was refused and the refund closed without refunding.

    ``code`` is the outcome code the refund now carries: ``expired``, ``disputed``,
    ``exceeds_refundable`` or ``rail_disabled``. The closing is committed before this is raised.
    """

    status = 409


def deadline(refund: Refund) -> datetime:
    """When ``refund`` stops waiting for a decision."""
    return refund.expires_at or refund.created_at + HOLD_FOR


@retry_on_conflict  # a deadlock or serialization failure runs it again; 503 busy after a few
def approve_refund(
    *,
    refund: Refund,
    actor: Any,
    note: str = "",
    via: str = DecidedVia.SILL,
    now: datetime | None = None,
    check_member: Callable[[Membership | None], None] | None = None,
) -> Refund:
    """Approve a held refund and execute it on its rail (once this transaction commits).

    Raises ``forbidden`` (403) unless ``actor`` is a member of the refund's site whose role
    decides held refunds (an owner or admin), checked again in the decision's transaction
    (``access.hold_member``: removed or demoted while the rail was read, the same refusal,
    nothing decided; ``check_member``, a caller's own check of the member as it reads then, a
    Slack click's link), :class:`AlreadyDecided` (409) when it is no longer held,
    :class:`RequesterCannotApprove` (403) when ``actor`` requested it, and
    :class:`DecisionRefused` (409) — after committing the refund's closing — when it expired
    or the charge changed since it was held (open dispute, less left to refund, its shop or
    store no longer connected) or its rail can no longer refund it, or credit it for a
    customer credit (switched off, its stored key unreadable).
    """
    require_member(actor, refund.site_id, Cap.DECIDE_HELD)
    asked_at = now or timezone.now()
    note = note.strip()[:NOTE_MAX_LENGTH]
    if refund.requested_by_id is None or refund.requested_by_id != actor.pk:
        # A requester's approval is refused below anyway.
        _catch_up_with_rail(refund, now=asked_at)
    with transaction.atomic():
        # Still allowed now, and until this commits: the approver was checked before the
        # rail's read, which can take seconds, and an owner's change since must not be
        # approved past (a later one waits for this decision). First: member changes lock
        # these rows before the site's audit chain, as the decision's append does.
        hold_member(actor, refund.site_id, Cap.DECIDE_HELD, check=check_member)
        # The agent's and customer's decisions first, then refund → order → charge (the lock
        # order of refunds.locks): the facts are checked again below, and what a refund
        # counts towards (its agent, its order's customer) never changes.
        lock_decision_scope(
            agent_id=refund.agent_id,
            customer_id=refund.customer_id
            if refund.is_credit
            else Order.objects.filter(pk=refund.order_id)
            .values_list("customer_id", flat=True)
            .first(),
        )
        locked = _lock_held(refund, actor=actor)
        # The deadline is judged now that the refund is locked: the rail's read and the
        # locks may have taken seconds, and the 24 hours may have run out meanwhile.
        now = now or timezone.now()
        if locked.requested_by_id is not None and locked.requested_by_id == actor.pk:
            raise RequesterCannotApprove(
                "You requested this refund, so another owner or admin has to approve it."
            )
        if now >= deadline(locked):
            _expire_on_decision(locked, now=now, actor=actor, via=via)
            refusal = ("expired", _expired_message(locked))
        else:
            try:
                quote = _facts_again(locked)
            except (RefundRefused, RailDisabled) as refused:
                refusal = (refused.code, refused.message)
            else:
                return _approve(locked, quote=quote, actor=actor, note=note, via=via, now=now)
            _close(
                locked,
                status=RefundStatus.REJECTED,
                outcome_code=refusal[0],
                now=now,
                actor=actor,
                reviewer=actor,
                note=note,
                via=via,
            )
    raise DecisionRefused(refusal[1], code=refusal[0])


def _facts_again(refund: Refund) -> Quote | None:
    """What may have changed since ``refund`` was held, checked again under its locks: the
    quote of a refund (``RefundRefused``), nothing for a credit (``RailDisabled``)."""
    if refund.is_credit:
        # A credit draws on no charge: nothing to re-quote (the rail checks the currency). Its
        # rail, though, may have been switched off, or its stored key become unreadable, since
        # it was held: the credit would only fail at execution (``creditor_for``).
        usable_rail_account(site_id=refund.site_id, rail=CREDIT_RAIL)
        return None
    order, charge = _lock_money_rows(refund)
    # The facts again: a dispute opened or less left since the refund was held, or its rail
    # switched off or its stored key no longer readable.
    return quote_refund(order=order, charge=charge, refund=refund, check_rail=True)


def _catch_up_with_rail(refund: Refund, *, now: datetime) -> None:
    """What the rail reports about a held refund's charge that Sill has not recorded, recorded
    now (``policies.facts.prefetch_rail_facts`` with the inbox's catch-up), so the approval's
    check of the facts counts it. A rail that cannot be read leaves Sill's books as they are
    (the check then goes by them, as before). A credit draws on no charge: nothing to read."""
    if refund.is_credit or refund.status != RefundStatus.HELD or refund.charge_id is None:
        return
    if now >= deadline(refund):
        return  # it expires below: nothing will reach the rail
    charge = (
        Charge.objects.select_related("order")
        .filter(pk=refund.charge_id, order__site_id=refund.site_id)
        .first()
    )
    if charge is None:
        return
    prefetch_rail_facts(
        site_id=refund.site_id, order=charge.order, charge=charge, now=now,
        catch_up=catch_up_charge, charge_only=True,
    )  # fmt: skip


def reject_refund(
    *,
    refund: Refund,
    actor: Any,
    note: str = "",
    via: str = DecidedVia.SILL,
    now: datetime | None = None,
    check_member: Callable[[Membership | None], None] | None = None,
) -> Refund:
    """Reject a held refund: nothing is sent to the rail.

    The requester may reject (withdraw) their own request, if their role decides held refunds.
    Raises ``forbidden`` (403) unless ``actor`` is a member of the refund's site whose role
    decides held refunds, checked again in the decision's transaction as an approval's is
    (``access.hold_member``, with ``check_member``: a Slack click's link),
    :class:`AlreadyDecided` when it is no longer held, and
    :class:`DecisionRefused` (code ``expired``) — after recording the expiry — when its 24
    hours had already run out.
    """
    require_member(actor, refund.site_id, Cap.DECIDE_HELD)
    note = note.strip()[:NOTE_MAX_LENGTH]
    with transaction.atomic():
        # Still allowed now, and until this commits: a rejection may wait for the refund's
        # lock behind another decision, and an owner who removed or demoted the member
        # meanwhile was told so (a later change waits for this one). The member's rows
        # first, then the refund's: the lock order of an approval.
        hold_member(actor, refund.site_id, Cap.DECIDE_HELD, check=check_member)
        locked = _lock_held(refund, actor=actor)
        # Judged once the refund is locked, as an approval is: a rejection that waited for
        # the lock past the 24 hours finds the refund expired.
        now = now or timezone.now()
        if now < deadline(locked):
            return _close(
                locked,
                status=RefundStatus.REJECTED,
                outcome_code="rejected_by_reviewer",
                now=now,
                actor=actor,
                reviewer=actor,
                note=note,
                via=via,
            )
        _expire_on_decision(locked, now=now, actor=actor, via=via)
    raise DecisionRefused(_expired_message(locked), code="expired")


def _expire_on_decision(refund: Refund, *, now: datetime, actor: Any, via: str) -> None:
    """The 24 hours ran out before ``actor``'s decision (made ``via``) took the lock: the
    refund expires, undecided; the record names who pressed the button, and where."""
    _close(
        refund, status=RefundStatus.EXPIRED, outcome_code="expired", now=now, actor=actor, via=via
    )


def expire_held_refunds(*, now: datetime | None = None, limit: int = 500) -> int:
    """Expire every held refund whose 24 hours have run out; returns how many expired.

    One transaction per refund, so a refund being decided right now (its row locked) only
    delays this one; if the decision wins, the refund is no longer held and is skipped.
    """
    now = now or timezone.now()
    overdue = Q(expires_at__lte=now) | Q(expires_at__isnull=True, created_at__lte=now - HOLD_FOR)
    ids = list(
        Refund.objects.filter(overdue, status=RefundStatus.HELD)
        .order_by("expires_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    expired = 0
    for refund_id in ids:
        with transaction.atomic():
            locked = _locked(refund_id)
            if locked is None or locked.status != RefundStatus.HELD or now < deadline(locked):
                continue
            _close(locked, status=RefundStatus.EXPIRED, outcome_code="expired", now=now)
            expired += 1
    return expired


# --- internals ------------------------------------------------------------------------------


def _locked(refund_id: str) -> Refund | None:
    """The refund, row-locked until the transaction ends, with its relations read after.

    Lock first, join after: a locking SELECT that waited for a concurrent decision returns
    the refund row as that decision left it, but rows joined into the same statement as
    they were before (PostgreSQL re-checks only the locked row), e.g. no ``decided_by``.
    """
    if not Refund.objects.select_for_update().filter(pk=refund_id).exists():
        return None
    return Refund.objects.select_related(
        "site", "agent", "requested_by", "mandate", "decided_by"
    ).get(pk=refund_id)


def _lock_held(refund: Refund, *, actor: Any) -> Refund:
    locked = _locked(refund.pk)
    if locked is None:  # pragma: no cover - refunds are never deleted
        raise AlreadyDecided("This refund no longer exists.")
    if locked.status != RefundStatus.HELD:
        raise AlreadyDecided(already_decided_message(locked, viewer=actor))
    return locked


def already_decided_message(refund: Refund, *, viewer: Any, lead: str = "Nothing changed") -> str:
    """What a decision that found ``refund`` decided already is told, on the held page and in
    Slack (``lead`` "Your click decided nothing"): who decided it, how (in Sill or in Slack,
    as recorded with the decision) and when, from the refund as it stands; "you" when it was
    ``viewer``, in another tab or click of theirs."""
    noun, done = money_words(refund)
    if refund.status == RefundStatus.EXPIRED:
        return f"{lead}: this {noun} expired after 24 hours, undecided; nothing was {done}."
    verb = "approved" if refund.decision == Decision.APPROVED else "rejected"
    when = f" ({deadline_text(refund.decided_at, refund.site.zone)})" if refund.decided_at else ""
    if refund.decided_by is None:
        return f"{lead}: Sill had already closed this {noun}{when}."
    who = "you" if refund.decided_by_id == viewer.pk else refund.decided_by.get_username()
    how = "in Slack" if refund.decided_via == DecidedVia.SLACK else "in Sill"
    if refund.decision == Decision.REJECTED and (why := refused_approval(refund.outcome_code)):
        return (
            f"{lead}: {who} had already approved this {noun} {how}{when}, "
            f"and Sill refused it ({why}); nothing was {done}."
        )
    return f"{lead}: {who} had already {verb} this {noun} {how}{when}."


def _expired_message(refund: Refund) -> str:
    when = deadline_text(deadline(refund), refund.site.zone)
    noun, done = money_words(refund)
    return f"This {noun} expired at {when}, 24 hours after it was held. Nothing was {done}."


def _lock_money_rows(refund: Refund) -> tuple[Order | None, Charge | None]:
    # The same rows, in the same order, that intake and settlement lock.
    order = Order.objects.select_for_update().filter(pk=refund.order_id).first()
    return order, Charge.objects.select_for_update().filter(pk=refund.charge_id).first()


def _approve(
    refund: Refund, *, quote: Quote | None, actor: Any, note: str, via: str, now: datetime
) -> Refund:
    escalated_hash = refund.decision_hash
    transition(refund, RefundStatus.PROCESSING)
    refund.decision = Decision.APPROVED
    refund.decided_by = actor
    refund.decided_at = now
    refund.decided_via = via
    refund.review_note = note
    refund.outcome_code = ""
    if quote is not None:
        reserve(refund=refund, charge=quote.charge)
    append_record(
        site=refund.site,
        kind="escalated_approved",
        body=refund_body(
            refund,
            decision="escalated_approved",
            reviewer=actor.get_username(),
            note=note or None,
            via=via,
            escalated_hash=escalated_hash or None,
            rules=list(refund.rules or []),
            recheck=_recheck_facts(quote.remaining) if quote is not None else {},
            decided_at=now.isoformat(),
        ),
        # The refund's UPDATE carries the record's hash and runs before the chain head lock.
        before_lock=lambda rec: _save_with_hash(refund, rec.hash),
        rehashed=lambda rec: _rehash(refund, rec.hash),
    )
    enqueue_execution(refund)
    return refund


def _recheck_facts(remaining: Money) -> dict[str, Any]:
    return {"remaining_minor": remaining.amount_minor, "open_dispute": False}


def _close(
    refund: Refund,
    *,
    status: str,
    outcome_code: str,
    now: datetime,
    actor: Any | None = None,
    reviewer: Any | None = None,
    note: str = "",
    via: str = "",
) -> Refund:
    """Close a held refund without refunding: ``escalated_rejected`` with ``outcome_code``.
    ``via``: where ``actor`` pressed the button (``DecidedVia``), "" when Sill closed it on
    its own (the 24 hours ran out with nobody deciding)."""
    escalated_hash = refund.decision_hash
    if refund.charge_id is not None:
        # The order and its charge, after the refund and before the chain head (the lock order
        # of refunds.locks), as an approval takes them: the refund's row may be written twice
        # here (its hash again when another append won the chain head), and then PostgreSQL
        # checks its foreign keys at commit, share-locking the charge. Taken only then, while
        # this transaction held the chain head, a staff refund or agent decision of the same
        # order (holding the charge, waiting for the head) deadlocked with the expiry sweep or
        # a rejection.
        _lock_money_rows(refund)
    transition(refund, status)
    refund.decision = Decision.REJECTED
    refund.outcome_code = outcome_code
    refund.decided_by = reviewer
    refund.decided_at = now
    refund.decided_via = via if reviewer is not None else ""
    refund.review_note = note
    append_record(
        site=refund.site,
        kind="escalated_rejected",
        body=refund_body(
            refund,
            decision="escalated_rejected",
            reviewer=reviewer.get_username() if reviewer is not None else None,
            # Who pressed the button; differs from reviewer when Sill refused their decision.
            acted_by=actor.get_username() if actor is not None else None,
            note=note or None,
            via=(via or None) if actor is not None else None,
            escalated_hash=escalated_hash or None,
            rules=list(refund.rules or []),
            expires_at=deadline(refund).isoformat(),
            decided_at=now.isoformat(),
        ),
        before_lock=lambda rec: _save_with_hash(refund, rec.hash),
        rehashed=lambda rec: _rehash(refund, rec.hash),
    )
    return refund


def _save_with_hash(refund: Refund, decision_hash: str) -> None:
    refund.decision_hash = decision_hash
    refund.save()


def _rehash(refund: Refund, decision_hash: str) -> None:
    # Another append won the chain head after the refund was saved: it takes the new hash.
    refund.decision_hash = decision_hash
    Refund.objects.filter(pk=refund.pk).update(decision_hash=decision_hash)
