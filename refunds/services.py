"""Refund state transitions: decide, reserve, settle, fail. One function per transition.

Every transition runs inside ``transaction.atomic()`` with the money rows locked
(``select_for_update`` on the order and its charge) and writes its audit record in the same
transaction, so a decision and its record commit or vanish together.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from audit.models import AuditRecord
from audit.services import append_record
from policies.decide import decide_refund
from policies.selectors import in_force
from policies.types import PolicyOutcome, RefundContext
from refunds.models import (
    RESERVED_STATUSES,
    Decision,
    Mandate,
    Refund,
    RefundOrigin,
    RefundStatus,
)
from sill import sql
from sill.errors import SillError
from sill.failpoints import failpoint
from sill.money import Money, format_money
from sill.orders.models import Charge, Order
from sill.orders.outside import COUNTED_STATES, claim_outside_refund
from sill.orders.services import refresh_refund_status
from sill.queue import enqueue_on_commit
from sill.rails.base import rail_label
from sill.rails.woocommerce.record import queue_woocommerce_record, withdraw_woocommerce_record

HOLD_FOR = timedelta(hours=24)
# A rail's refusal of a refund that says its books are ahead of Sill's: the payment is refunded
# already, less is left than Sill counts, or it is disputed (PayPal names each; Shopify's
# suggested refund says the first two).
BOOKS_BEHIND_CODES = frozenset({"already_refunded", "exceeds_refundable", "disputed"})
# The beat task that sends a failure, failed-after-settlement or confirmation email whose
# on-commit message never arrived (refunds.tasks.notify_missed_outcomes_task).
MISSED_OUTCOMES = "refunds.notify_missed_outcomes"

REFUND_TRANSITIONS: dict[str, frozenset[str]] = {
    RefundStatus.HELD: frozenset(
        {RefundStatus.PROCESSING, RefundStatus.REJECTED, RefundStatus.EXPIRED}
    ),
    RefundStatus.PROCESSING: frozenset(
        {RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.NEEDS_ATTENTION}
    ),
    # Only the rail's answer for the idempotency key, or an owner's record of the provider's
    # dashboard, leaves needs_attention.
    RefundStatus.NEEDS_ATTENTION: frozenset({RefundStatus.SUCCEEDED, RefundStatus.FAILED}),
    # Only when the rail reports the settled refund failed after all (reverse_settled_refund).
    RefundStatus.SUCCEEDED: frozenset({RefundStatus.FAILED}),
    RefundStatus.FAILED: frozenset(),
    RefundStatus.REJECTED: frozenset(),
    RefundStatus.EXPIRED: frozenset(),
}


class SettlementExceedsCharge(SillError):
    """The rail made this refund, but Sill's books already count so much of its charge as
    refunded (outside Sill, or by Sill) that recording it too would count more than was
    charged (the charge's constraint). The money moved once; a person compares the charge's
    refunds at the rail with Sill's. Nothing was written."""

    code = "exceeds_charge_at_rail"
    status = 409


class LeaseLost(SillError):
    """The caller's execution lease was taken over: it may no longer change the refund."""

    code = "lease_lost"
    status = 409


def transition(refund: Refund, status: str) -> None:
    """Set ``refund.status`` to ``status`` if REFUND_TRANSITIONS allows it (the caller saves)."""
    if status not in REFUND_TRANSITIONS[refund.status]:
        raise SillError(
            f"refund {refund.id} cannot go from {refund.status} to {status}",
            code="invalid_transition",
        )
    refund.status = status


def refund_body(refund: Refund, **extra: Any) -> dict[str, Any]:
    """The audit body describing ``refund``: integers and strings only (exact amounts)."""
    body: dict[str, Any] = {
        "refund_id": refund.id,
        "order_id": refund.order_id,
        "origin": refund.origin,
        # A null foreign key reads as None without a query.
        "agent_id": refund.agent.agent_id if refund.agent is not None else None,
        "requested_by": (
            refund.requested_by.get_username() if refund.requested_by is not None else None
        ),
        "mandate_id": refund.mandate.mandate_id if refund.mandate is not None else None,
        "amount_minor": refund.amount_minor,
        "currency": refund.currency,
        "rail": refund.rail,
        "reason": refund.outcome_code or None,  # the audit body keeps its key
        "reason_code": refund.reason_code or None,
        "reason_path": refund.reason_path or None,
        "note": refund.note or None,
    }
    if refund.is_credit:
        # A customer-balance credit names its customer (the rail's id) instead of an order.
        body["kind"] = refund.kind
        body["customer"] = refund.customer.rail_customer_id if refund.customer else None
    body.update(extra)
    return body


def record_decision(
    *,
    refund: Refund,
    outcome: PolicyOutcome | None,
    now: datetime,
    along: sql.Write | None = None,
) -> Refund:
    """Write the decision record of a fresh refund, the refund carrying the record's hash.

    ``refund`` is best still unsaved (:func:`unsaved_refund`): its INSERT then carries
    ``decision_hash`` and goes with the audit append itself (``append_record``'s ``writes``:
    one statement on PostgreSQL, written only when the append takes the site's chain head),
    so no round trip of the decision runs between its record's signing and the head's lock.
    ``along``: another write of the decision's to send with it (the reservation,
    :func:`reservation`). A refund already saved (:func:`new_refund`) gets its hash with one
    UPDATE after the append, ``along`` before it. The caller's other writes come first.
    """
    kinds: dict[str, str] = {
        RefundStatus.PROCESSING: "approved",
        RefundStatus.HELD: "escalated",
        RefundStatus.REJECTED: "rejected",
    }
    kind = kinds[refund.status]
    unsaved = refund._state.adding
    carried = [along] if along is not None else []
    if along is not None and not unsaved:
        with sql.cursor() as cursor:
            cursor.execute(along.alone, along.params)
        carried = []

    # refund.save(force_insert=True), its statement written once (sill.sql); its values
    # prepared before the append reads the chain head (only the record's hash waits for it).
    insert_refund = sql.insert_write_later(refund, "decision_hash") if unsaved else None

    def writes(record: AuditRecord) -> list[sql.Write]:
        refund.decision_hash = record.hash
        return [insert_refund(record.hash), *carried] if insert_refund is not None else []

    record = append_record(
        site=refund.site,
        kind=kind,
        body=refund_body(
            refund,
            decision=kind,
            policy_version=outcome.policy_version if outcome else None,
            rules=[r.as_dict() for r in outcome.rules] if outcome else [],
            facts=refund.facts or {},
            auto_refund=bool(outcome and outcome.auto_refund),
            mandate_sha256=mandate_sha256(refund.mandate),
            reviewer=None,
            decided_at=now.isoformat(),
            expires_at=refund.expires_at.isoformat() if refund.expires_at else None,
        ),
        writes=writes,
        # A decision made by the site's rules goes into the chain only while they are the
        # ones in force (a version switched on meanwhile: the decision is made again).
        guard=in_force(refund.site_id, outcome.policy_version) if outcome else None,
    )
    if not unsaved:
        refund.decision_hash = record.hash
        refund.save(update_fields=["decision_hash", "updated_at"])
    # Kept on the instance for the answer's receipt (refunds.agent.answers), not re-read.
    refund.decision_record = record
    return refund


def mandate_sha256(mandate: Mandate | None) -> str | None:
    """What binds a decision record to the exact bytes the agent sent (its evidence bundle and
    receipt carry them): SHA-256 of the mandate as received, hex; None without a mandate."""
    return hashlib.sha256(bytes(mandate.raw)).hexdigest() if mandate is not None else None


def record_purchase_decision(
    *, mandate: Mandate, order: Order, rail: str, reason: str | None = None, now: datetime
) -> AuditRecord:
    """Write the decision record of a purchase mandate that verified (in the caller's
    transaction, after its own writes), signed as a refund's decision is and naming the
    mandate's bytes and its order: ``approved`` when the order's charge was created (the
    worker charges it after commit; its ``charge`` record names this one's hash), ``rejected``
    with ``reason`` when the order was left cancelled. No refund exists, so the body names
    none; ``kind`` says what was decided, as a credit's says it is a credit."""
    return append_record(
        site=mandate.site,
        kind="rejected" if reason else "approved",
        body={
            "kind": "purchase",
            "order_id": order.id,
            "order_number": order.number,
            "origin": RefundOrigin.AGENT.value,
            "agent_id": mandate.agent.agent_id,
            "mandate_id": mandate.mandate_id,
            "amount_minor": order.total_minor,
            "currency": order.currency,
            "rail": rail,
            "reason": reason,
            # No rule judges a purchase (yet): a refusal is the rail's state, not a policy.
            "policy_version": None,
            "rules": [],
            "mandate_sha256": mandate_sha256(mandate),
            "decided_at": now.isoformat(),
        },
    )


def reserve(*, refund: Refund, charge: Charge) -> None:
    """Hold ``refund.amount`` on the (locked) charge; the database refuses an over-reservation."""
    held = reservation(refund=refund, charge=charge)
    with sql.cursor() as cursor:
        cursor.execute(held.alone, held.params)


def reservation(*, refund: Refund, charge: Charge) -> sql.Write:
    """The UPDATE that holds ``refund.amount`` on the (locked) charge, for the caller to send
    (:func:`reserve`, or with the decision's audit append: :func:`record_decision`'s
    ``along``); the charge in memory counts it already. ``exceeds_refundable`` past what
    remains; the database refuses an over-reservation too."""
    if refund.amount_minor > charge.remaining.amount_minor:
        raise SillError(
            f"only {charge.remaining} is refundable", code="exceeds_refundable", field="amount"
        )
    # The caller holds the charge's row lock: nobody else changes it before the UPDATE runs.
    charge.amount_reserved_minor += refund.amount_minor
    # Hand-written: every approved decision runs it (the ORM's UPDATE cost more to build).
    return sql.update_write(
        "orders_charge",
        '"amount_reserved_minor" = "amount_reserved_minor" + %s',
        [refund.amount_minor],
        pk=charge.pk,
    )


def _locked_for_change(refund_id: str, *, token: str | None) -> Refund:
    """The refund, row-locked; ``LeaseLost`` unless ``token`` is its current lease token.

    ``token=None`` is for callers that own no lease and act on the refund's current state
    only (none in the execution path: every rail-driven change is fenced).
    """
    refund = (
        Refund.objects.select_for_update(of=("self",))
        .select_related("site", "order", "customer")
        .get(pk=refund_id)
    )
    if token is not None and refund.lease_token != token:
        raise LeaseLost(f"refund {refund_id}: the execution lease was taken over")
    return refund


@transaction.atomic
def settle_refund(
    *,
    refund_id: str,
    provider_refund_id: str,
    token: str | None,
    now: datetime | None = None,
    resolved_by: Any = None,
) -> bool:
    """Record a refund the rail confirmed. Idempotent: False when it was already settled.

    Settles from ``processing`` or ``needs_attention``; raises ``LeaseLost`` when ``token``
    is no longer the refund's lease token.
    """
    now = now or timezone.now()
    refund = _locked_for_change(refund_id, token=token)
    if refund.status not in RESERVED_STATUSES:
        return False
    failpoint("in_settlement")
    # The rail reported this very refund failed while it was executing (its webhook overtook
    # the worker, which still holds the rail's first "succeeded"): settled, then reversed at
    # once below, as if the report had come after. Nothing is written on a WooCommerce order.
    failed_at_rail = bool(refund.failed_at_rail_id) and (
        refund.failed_at_rail_id == provider_refund_id
    )
    order = None
    if not refund.is_credit:  # a customer credit draws on no charge and changes no order
        order = Order.objects.select_for_update().get(pk=refund.order_id)
        charge = Charge.objects.select_for_update().get(pk=refund.charge_id)
        # The rail may have reported this very refund without Sill's marker before now, and it
        # was recorded as made outside Sill: counted there and here, the buyer would show as
        # paid back twice. Under the charge's lock, which recording an outside refund takes
        # too (and then skips an id Sill settled), so whichever comes second sees the other.
        outside = claim_outside_refund(
            order=order, charge=charge, provider_refund_id=provider_refund_id, refund_id=refund.id
        )
        if outside is not None and outside.status not in COUNTED_STATES and not failed_at_rail:
            # The rail reported it failed or canceled (states never come back): settled, then
            # reversed at once, as a failure reported with Sill's marker is.
            failed_at_rail = True
            refund.failed_at_rail_id = provider_refund_id
            refund.failed_at_rail_message = (
                f"The rail reported refund {provider_refund_id} {outside.status}."
            )
            refund.failed_at_rail_source = f"outside refund record {provider_refund_id}"[:255]
        if refund.amount_minor > charge.amount_minor - _counted_refunded(charge):
            raise SettlementExceedsCharge(
                _beyond_charge(refund, charge, provider_refund_id=provider_refund_id)
            )
        Charge.objects.filter(pk=charge.pk).update(
            amount_reserved_minor=F("amount_reserved_minor") - refund.amount_minor,
            amount_refunded_minor=F("amount_refunded_minor") + refund.amount_minor,
        )
    transition(refund, RefundStatus.SUCCEEDED)
    refund.provider_refund_id = provider_refund_id
    refund.settled_at = now
    refund.lease_until = None
    refund.next_check_at = None
    refund.failure_message = ""
    refund.save()
    if order is not None:
        refresh_refund_status(order)
    if order is not None and not failed_at_rail:
        # A WooCommerce order's refund ran on Stripe: record it on the Woo order too (on
        # commit, retried; never the refund's failure).
        queue_woocommerce_record(
            order=order,
            refund_id=refund.id,
            amount=refund.amount,
            reason=refund.reason_label or refund.reason_code or "Refund",
        )
    append_record(
        site=refund.site,
        kind="settlement",
        body=refund_body(
            refund,
            decision_hash=refund.decision_hash,
            provider_refund_id=provider_refund_id,
            settled_at=now.isoformat(),
            resolved_by=resolved_by.get_username() if resolved_by is not None else None,
        ),
    )
    enqueue_on_commit("refunds.send_confirmation", refund.id, recovered_by=MISSED_OUTCOMES)
    if failed_at_rail:
        # The buyer's confirmation is not sent: it is claimed only while the refund succeeded.
        reverse_settled_refund(
            refund_id=refund.id,
            provider_refund_id=provider_refund_id,
            message=refund.failed_at_rail_message,
            source=refund.failed_at_rail_source,
        )
    return True


def _counted_refunded(charge: Charge) -> int:
    return charge.amount_refunded_minor + charge.amount_refunded_outside_minor


def _beyond_charge(refund: Refund, charge: Charge, *, provider_refund_id: str) -> str:
    """What a merchant reads when the rail made ``refund`` and the (locked) charge counts too
    much refunded already to record it (:class:`SettlementExceedsCharge`)."""
    outside = Money(charge.amount_refunded_outside_minor, charge.currency)
    by_sill = Money(charge.amount_refunded_minor, charge.currency)
    counted = f"{format_money(outside)} of the {format_money(charge.amount)} charged"
    counted += " as refunded outside Sill"
    if by_sill.amount_minor:
        counted += f" and {format_money(by_sill)} refunded by Sill"
    return (
        f"{rail_label(refund.rail)} refunded {format_money(refund.amount)} for this refund as "
        f"{provider_refund_id}, but Sill already counts {counted}: recording this one too "
        "would count more than was charged. The money moved once and Sill will not send it "
        "again. Compare the charge's refunds in the provider's dashboard with those on the "
        "order page: Sill records this refund once its books leave room for it."
    )


@transaction.atomic
def note_failure_at_rail(
    *, refund_id: str, provider_refund_id: str, message: str, source: str
) -> str:
    """The rail reports that ``provider_refund_id``, Sill's refund ``refund_id``, failed or was
    canceled (``message``: what to tell the merchant; ``source``: the event or run).

    Under the refund's row lock, which settlement takes too, so whichever comes second sees
    the other: a settled refund is reversed now (:func:`reverse_settled_refund`); one still
    executing keeps the report, and its settlement under that id reverses it
    (:func:`settle_refund`): its worker may hold the rail's earlier "succeeded". Returns
    ``"reversed"``, ``"noted"`` or ``"unchanged"`` (failed already, or settled under another
    id).
    """
    refund = _locked_for_change(refund_id, token=None)
    if refund.status in RESERVED_STATUSES:
        if refund.failed_at_rail_id != provider_refund_id:
            refund.failed_at_rail_id = provider_refund_id
            refund.failed_at_rail_message = message[:500]
            refund.failed_at_rail_source = source[:255]
            refund.save(
                update_fields=[
                    "failed_at_rail_id",
                    "failed_at_rail_message",
                    "failed_at_rail_source",
                    "updated_at",
                ]
            )
        return "noted"
    reversed_now = reverse_settled_refund(
        refund_id=refund_id, provider_refund_id=provider_refund_id, message=message, source=source
    )
    return "reversed" if reversed_now else "unchanged"


@transaction.atomic
def fail_refund(
    *, refund_id: str, code: str, message: str, token: str | None, resolved_by: Any = None
) -> bool:
    """The rail said nothing moved for this refund's key: release the reservation.

    Callers must only get here on the rail's own answer (a decline, a lookup that found no
    refund for the key) or before any attempt could have reached the rail, or on an owner's
    record of the provider's dashboard. Raises ``LeaseLost`` on a stale ``token``.
    """
    refund = _locked_for_change(refund_id, token=token)
    if refund.status not in RESERVED_STATUSES:
        return False
    Charge.objects.select_for_update().filter(pk=refund.charge_id).update(
        amount_reserved_minor=F("amount_reserved_minor") - refund.amount_minor
    )
    transition(refund, RefundStatus.FAILED)
    refund.outcome_code = code
    refund.failure_message = message[:500]
    refund.lease_until = None
    refund.next_check_at = None
    refund.save()
    append_record(
        site=refund.site,
        kind="settlement",
        body=refund_body(
            refund,
            decision_hash=refund.decision_hash,
            outcome="failed",
            message=refund.failure_message,
            resolved_by=resolved_by.get_username() if resolved_by is not None else None,
        ),
    )
    # Owners and admins hear of it once (refunds.review.failures), after the commit, or from
    # the sweep when that message is lost.
    enqueue_on_commit("refunds.notify_failed", refund.id, recovered_by=MISSED_OUTCOMES)
    if code in BOOKS_BEHIND_CODES and refund.charge_id:
        # The rail refused because it holds a refund or dispute Sill has not recorded (made in
        # its dashboard since the decision): read the charge now, so the order page shows it
        # and offers no refund the rail will refuse again.
        enqueue_on_commit(
            "refunds.catch_up_charge",
            refund.charge_id,
            f"refund-failed:{refund.id}",
            recovered_by="refunds.reconcile",
        )
    return True


@transaction.atomic
def reverse_settled_refund(
    *, refund_id: str, provider_refund_id: str, message: str, source: str
) -> bool:
    """The rail reports that a settled refund failed after all: its money came back.

    What it refunded is refundable again, the refund is ``failed`` with the code
    ``failed_after_settlement`` (``settled_at`` stays: it was settled, then reversed), the
    order's status follows, a signed ``refund_reversed`` record names ``source`` (the event or
    reconciliation run that reported it), and owners and admins are told (on commit).
    Idempotent: False when the refund is not (or no longer) settled under that provider id.
    """
    now = timezone.now()
    refund = _locked_for_change(refund_id, token=None)
    if refund.status != RefundStatus.SUCCEEDED or refund.provider_refund_id != provider_refund_id:
        return False
    order = Order.objects.select_for_update().get(pk=refund.order_id)
    Charge.objects.select_for_update().filter(pk=refund.charge_id).update(
        amount_refunded_minor=F("amount_refunded_minor") - refund.amount_minor
    )
    transition(refund, RefundStatus.FAILED)
    refund.outcome_code = "failed_after_settlement"
    refund.failure_message = message[:500]
    refund.reversed_at = now
    refund.save()
    refresh_refund_status(order)
    # A WooCommerce order's record of it: not written now if it was still to be (the money
    # came back); one already written stays, and the order page says to delete it there.
    withdraw_woocommerce_record(refund_id=refund.id)
    append_record(
        site=refund.site,
        kind="refund_reversed",
        body=refund_body(
            refund,
            decision_hash=refund.decision_hash,
            provider_refund_id=provider_refund_id,
            message=refund.failure_message,
            source=source,
            settled_at=refund.settled_at.isoformat() if refund.settled_at else None,
            reversed_at=now.isoformat(),
        ),
    )
    enqueue_on_commit("refunds.notify_reversed", refund.id, recovered_by=MISSED_OUTCOMES)
    return True


@transaction.atomic
def flag_refund_for_attention(
    *,
    refund_id: str,
    token: str,
    code: str,
    message: str,
    next_check_at: datetime,
    provider_refund_id: str = "",
) -> bool:
    """The rail may have moved the money and cannot say now, or made it and Sill cannot
    record it (``provider_refund_id``: the rail's refund, kept on the refund and in its
    record): keep it reserved, tell people.

    The refund leaves ``processing`` for ``needs_attention``; the beat task asks the rail
    again from ``next_check_at``; owners and admins get one email (on commit). A refund that
    needs attention already is asked about again from ``next_check_at``, its lease given
    back; it changes (and a record says so, no second email) only when the rail's refund id
    is new to it. False when nothing was recorded.
    """
    now = timezone.now()
    refund = _locked_for_change(refund_id, token=token)
    again = refund.status == RefundStatus.NEEDS_ATTENTION
    if again and provider_refund_id in ("", refund.provider_refund_id):
        refund.next_check_at = next_check_at
        refund.lease_until = None
        refund.save(update_fields=["next_check_at", "lease_until", "updated_at"])
        return False
    if not again:
        if refund.status != RefundStatus.PROCESSING:
            return False
        transition(refund, RefundStatus.NEEDS_ATTENTION)
        refund.attention_since = now
    refund.outcome_code = code
    refund.failure_message = message[:500]
    refund.provider_refund_id = provider_refund_id
    refund.next_check_at = next_check_at
    refund.lease_until = None
    refund.save()
    append_record(
        site=refund.site,
        kind="needs_attention",
        body=refund_body(
            refund,
            decision_hash=refund.decision_hash,
            attempts=refund.attempts,
            message=refund.failure_message,
            flagged_at=now.isoformat(),
            **({"provider_refund_id": provider_refund_id} if provider_refund_id else {}),
        ),
    )
    if not again:
        enqueue_on_commit(
            "refunds.notify_attention", refund.id, recovered_by="refunds.check_attention"
        )
    return True


def new_refund(**fields: Any) -> Refund:
    """Create a refund row; origin, decision and status must be consistent."""
    refund = unsaved_refund(**fields)
    refund.save(force_insert=True)
    return refund


def unsaved_refund(**fields: Any) -> Refund:
    """A refund checked like :func:`new_refund`'s but not inserted yet: :func:`record_decision`
    inserts it with its decision hash (one INSERT instead of an INSERT and an UPDATE)."""
    refund = Refund(**fields)
    if refund.origin not in RefundOrigin.values or refund.decision not in Decision.values:
        raise SillError("invalid refund", code="invalid_field")
    return refund


def decide_and_open(*, context: RefundContext, fields: dict[str, Any]) -> Refund:
    """Decide a quoted refund and open it: held, rejected, or approved and reserved.

    The caller holds the row locks on ``context.order`` and ``context.charge`` inside its
    transaction. An approved refund is reserved here and its execution enqueued on commit;
    the decision record is written in the same transaction either way.
    """
    outcome = decide_refund(context)
    fields = {
        **fields,
        "site": context.site,
        "order": context.order,
        "charge": context.charge,
        "rail": context.charge.rail,
        "amount_minor": context.amount.amount_minor,
        "currency": context.amount.currency,
    }
    return open_decided(outcome=outcome, fields=fields, now=context.now, charge=context.charge)


def open_decided(
    *, outcome: PolicyOutcome, fields: dict[str, Any], now: datetime, charge: Charge | None
) -> Refund:
    """Open a refund (or credit) as ``outcome`` decided it: rejected ``policy_denied``, held for
    24 hours (owners and admins told on commit), or approved — reserved on ``charge`` when it
    draws on one (a credit does not) and executed once this transaction commits — and write
    its decision record, in the caller's transaction."""
    fields = {**fields, "facts": outcome.facts, "rules": [r.as_dict() for r in outcome.rules]}
    along = None
    if outcome.action == "deny":
        refund = unsaved_refund(
            **fields, decision=Decision.REJECTED, status=RefundStatus.REJECTED,
            outcome_code="policy_denied",
        )  # fmt: skip
    elif outcome.action == "require_approval":
        refund = unsaved_refund(
            **fields, decision=Decision.ESCALATED, status=RefundStatus.HELD,
            expires_at=now + HOLD_FOR,
        )  # fmt: skip
        notify_hold(refund)
    else:
        refund = unsaved_refund(
            **fields, decision=Decision.APPROVED, status=RefundStatus.PROCESSING
        )
        if charge is not None:
            # Sent with the refund's INSERT and the audit append: no round trip of its own.
            along = reservation(refund=refund, charge=charge)
        enqueue_execution(refund)
    return record_decision(refund=refund, outcome=outcome, now=now, along=along)


def enqueue_execution(refund: Refund) -> None:
    """Execute on the rail once the current transaction commits (never before)."""
    enqueue_on_commit("refunds.execute", refund.id, recovered_by="refunds.recover_stuck")


def notify_hold(refund: Refund) -> None:
    """Tell the site's owners and admins that ``refund`` is held, once this transaction commits.

    The notification itself is idempotent, and the every-minute sweep sends any this missed.
    """
    enqueue_on_commit("refunds.notify_held", refund.id, recovered_by="refunds.notify_pending_held")
