"""Staff refunds from the order page and the staff API: full, fixed amount or percentage.

A staff refund goes through the same pipeline as an agent's: quote from Sill's own records,
decide with the policies (``refundOrigin = staff``), then held, rejected, or reserved and
executed on the original rail by Celery (``refunds.services.decide_and_open``).

Concurrency: the order row and its charge are locked (``select_for_update``) before the
remaining amount is read, so two refunds of one order run one after the other and the second
sees what the first reserved; the charge's check constraint backs it in the database.

Double submits: the form carries the :class:`OrderSnapshot` the user saw (remaining amount and
number of refunds on the order). Under the locks, a snapshot that no longer matches refuses the
request with ``order_changed`` (409), so a resubmission after the first refund went through
(held, rejected or processing: every outcome adds a refund row) makes nothing. It needs no
storage of used tokens, and it also stops two people refunding the same order at once from
both acting on a stale view.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from policies.facts import prefetch_rail_facts
from policies.types import RefundContext
from refunds.labels import percent_text
from refunds.locks import lock_decision_scope, retry_on_conflict
from refunds.models import Refund, RefundOrigin, RefundReason
from refunds.quote import Quote, RefundRefused, charged_charge, quote_refund
from refunds.reasons.selectors import pickable_reason
from refunds.reasons.services import hold_reason_tree
from refunds.reconcile.inbox import catch_up_charge
from refunds.services import decide_and_open
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Site
from sill.errors import SillError
from sill.money import PLAIN_DECIMAL_RE, Money, format_money
from sill.orders.models import Charge, Order
from sill.rails.base import RefundFacts, amount_step, rail_label
from sill.rails.registry import RailDisabled, usable_rail_account

RefundKind = Literal["full", "amount", "percentage"]
KINDS: tuple[str, ...] = ("full", "amount", "percentage")
PERCENT_DECIMALS = 2

ROUNDING_RULE = (
    "A percentage is of the order total, rounded half up to the currency's smallest unit "
    "(the cent for USD, the whole yen for JPY, the fils for KWD) or to the smallest amount "
    "the payment's rail refunds in it (10 fils on Stripe, a whole forint on PayPal), and "
    "never more than what is left to refund."
)


class OrderChanged(SillError):
    code = "order_changed"
    status = 409


class NotRefundable(SillError):
    code = "order_not_refundable"
    status = 409


@dataclass(frozen=True)
class OrderSnapshot:
    """What the user saw when the form was rendered; ``None`` fields are not checked."""

    remaining_minor: int | None = None
    refund_count: int | None = None
    # The amount the confirmation showed (minor units): the refund must come to exactly it.
    amount_minor: int | None = None


def typed_text(text: str) -> str:
    """``text`` as a refusal quotes it: as typed when it is printable ASCII (``'1,000.00'``),
    else by the first other character, named (``Text with a no-break space (U+00A0)``). A
    Python repr showed ``'1\\xa0000'`` for the "1 000" a spreadsheet pasted, and an invisible
    or fullwidth character cannot be seen in quotes at all."""
    for char in text:
        if not " " <= char <= "~":
            name = unicodedata.name(char, "character").lower()
            return f"Text with a {name} (U+{ord(char):04X})"
    return f"'{text}'"


def parse_percentage(value: Any, *, field: str = "percentage") -> Decimal:
    """``"25"``, ``"12.5"``, ``Decimal("33.33")`` → a percentage in (0, 100], ≤ 2 decimals."""
    if isinstance(value, bool | float) or value is None:
        raise SillError("Enter a percentage, e.g. 25.", code="invalid_field", field=field)
    if isinstance(value, Decimal | int):
        pct = Decimal(value)
    else:
        text = str(value).strip().removesuffix("%").strip()
        if len(text) > 32:  # refused whole, in words that do not repeat it
            raise SillError(
                "That percentage is too long: type a number from 0.01 to 100 (e.g. 25).",
                code="invalid_field",
                field=field,
            )
        # ASCII digits only: Decimal() alone also reads Arabic-Indic or fullwidth digits.
        if not PLAIN_DECIMAL_RE.fullmatch(text):
            raise SillError(
                f"{typed_text(text)} is not a percentage: type a number from 0.01 to 100 in "
                "digits, with a dot before any decimals (e.g. 12.5).",
                code="invalid_field",
                field=field,
            )
        try:
            pct = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern already guards this
            raise SillError(
                f"{value!r} is not a percentage.", code="invalid_field", field=field
            ) from None
    if not pct.is_finite() or pct <= 0 or pct > 100:
        raise SillError(
            "A percentage is more than 0 and at most 100.", code="invalid_field", field=field
        )
    if pct != pct.quantize(Decimal(1).scaleb(-PERCENT_DECIMALS)):
        raise SillError(
            f"A percentage has at most {PERCENT_DECIMALS} decimals.",
            code="invalid_field",
            field=field,
        )
    return pct


@dataclass(frozen=True)
class PercentageAmount:
    amount: Money  # what will be refunded
    exact: Money  # the rounded percentage before the cap
    capped: bool  # True when less remained than the percentage asked for


def percentage_of_total(
    *, total: Money, percentage: Decimal, remaining: Money, step: int = 1
) -> PercentageAmount:
    """``percentage`` % of ``total``, rounded half up to ``step`` minor units (the rail's
    ``sill.rails.base.amount_step``: 1 but where the rail takes coarser amounts), capped at
    ``remaining``.

    Pure arithmetic on integers and Decimal: 50 % of USD 10.01 = 5.005 → 5.01; 50 % of
    JPY 1,001 = 500.5 → 501; 50 % of KWD 1.001 = 0.5005 → 0.501, and 0.500 in Stripe's
    10-fils steps. The cap means 100 % after a partial refund refunds what is left, and
    rounding up never refunds more than was charged.
    """
    steps = (Decimal(total.amount_minor) * percentage / 100 / step).quantize(
        Decimal(1), rounding=ROUND_HALF_UP
    )
    exact = Money(int(steps) * step, total.currency)
    capped = exact > remaining
    return PercentageAmount(amount=remaining if capped else exact, exact=exact, capped=capped)


def refusal_for(
    order: Order, charge: Charge | None, *, rail_refused: RailDisabled | None = None
) -> str | None:
    """Why ``order`` can't be refunded at all right now, in words for staff; None if it can.

    ``rail_refused``: what the charge's rail refuses (switched off, its stored key unreadable:
    ``sill.rails.registry.account_refusal``), as the caller read it; said when the order
    itself refuses nothing, as the confirmation says it.
    """
    try:
        quote_refund(order=order, charge=charge)
    except RefundRefused as refused:
        return refused.message
    return rail_refused.message if rail_refused is not None else None


def _quote(order: Order, charge: Charge | None, *, rail_facts: RefundFacts | None = None) -> Quote:
    """The quote for a staff refund; ``order_not_refundable`` (409) with the quote's words.

    Except ``rail_disabled`` (a rail switched off, a WooCommerce order whose site has no Stripe
    connected), which keeps its code: nothing about the order refuses it, the merchant's set-up
    does, and a retry under the same Idempotency-Key must run again once that is fixed (the
    code is not stored: ``idempotency.RETRYABLE_CODES``).
    """
    try:
        return quote_refund(order=order, charge=charge, rail_facts=rail_facts)
    except RefundRefused as refused:
        if refused.code == "rail_disabled":
            raise SillError(refused.message, code="rail_disabled", status=409) from refused
        raise NotRefundable(refused.message) from refused


def _amount_for(
    *,
    kind: str,
    order: Order,
    remaining: Money,
    amount: Money | None,
    percentage: Decimal | None,
    held: Money | None = None,
    rail: str = "",
) -> Money:
    step = amount_step(rail, order.currency)
    if kind == "full":
        return remaining
    if kind == "amount":
        if amount is None:
            raise SillError("Enter the amount to refund.", code="invalid_field", field="amount")
        if amount.currency != order.currency:
            raise SillError(
                f"This order is in {order.currency}.", code="invalid_field", field="amount"
            )
        if amount.amount_minor <= 0:
            raise SillError(
                "The amount must be more than zero.", code="invalid_field", field="amount"
            )
        if amount > remaining:
            pending = (
                f" ({format_money(held)} is awaiting approval and already counts)"
                if held is not None and held.amount_minor
                else ""
            )
            raise SillError(
                f"At most {format_money(remaining)} can be refunded on this order{pending}; "
                f"{format_money(amount)} is too much.",
                code="exceeds_refundable",
                field="amount",
            )
        if amount.amount_minor % step:
            # Refused, never rounded: the rail would refuse it when the refund runs.
            below = amount.amount_minor - amount.amount_minor % step
            near = [m for m in (below, below + step) if 0 < m <= remaining.amount_minor]
            words = " or ".join(format_money(Money(m, amount.currency)) for m in near)
            raise SillError(
                f"{rail_label(rail)} refunds {amount.currency} only in steps of "
                f"{format_money(Money(step, amount.currency))}: {format_money(amount)} can't be "
                "sent." + (f" Enter {words}." if words else ""),
                code="invalid_field",
                field="amount",
            )
        return amount
    if kind == "percentage":
        if percentage is None:
            raise SillError(
                "Enter the percentage to refund.", code="invalid_field", field="percentage"
            )
        result = percentage_of_total(
            total=order.total, percentage=percentage, remaining=remaining, step=step
        )
        if result.amount.amount_minor <= 0:
            raise SillError(
                f"{percent_text(percentage)} of {format_money(order.total)} rounds to "
                f"{format_money(result.exact)}; nothing to refund.",
                code="invalid_field",
                field="percentage",
            )
        return result.amount
    raise SillError(
        "Choose a full, fixed-amount or percentage refund.", code="invalid_field", field="kind"
    )


def _check_snapshot(*, order: Order, remaining: Money, expected: OrderSnapshot | None) -> None:
    if expected is None:
        return
    changed = (
        expected.remaining_minor is not None and expected.remaining_minor != remaining.amount_minor
    )
    if not changed and expected.refund_count is not None:
        changed = Refund.objects.filter(order=order).count() != expected.refund_count
    if changed:
        raise OrderChanged(
            f"Order #{order.number} changed since you opened it (a refund was made, or the "
            f"refundable amount is now {format_money(remaining)}). Nothing was refunded by "
            "this request: review the order and submit again if another refund is still due."
        )


def _check_confirmed(*, order: Order, amount: Money, expected: OrderSnapshot | None) -> None:
    """The refund comes to what the user confirmed, or nothing moves: a full refund takes
    whatever is left when it runs, which a refund released since the confirmation changes."""
    if expected is None or expected.amount_minor is None:
        return
    if expected.amount_minor != amount.amount_minor:
        raise OrderChanged(
            f"Order #{order.number} changed since you confirmed: this refund now comes to "
            f"{format_money(amount)}. Nothing was refunded by this request: review the order "
            "and submit again if that refund is still due."
        )


# The whole call is run again after a deadlock or serialization failure (503 ``busy`` after
# a few): the rail's facts read before the transaction are then read afresh, which is fine.
@retry_on_conflict
def create_staff_refund(
    *,
    site: Site,
    order: Order,
    actor: Any,
    kind: RefundKind,
    amount: Money | None = None,
    percentage: Decimal | None = None,
    reason: RefundReason | int | str,
    note: str = "",
    expected: OrderSnapshot | None = None,
    now: datetime | None = None,
    on_opened: Callable[[Refund], None] | None = None,
    token_id: int | None = None,
) -> Refund:
    """Refund ``order`` on behalf of ``actor``, a member of ``site`` whose role may refund
    (owners, admins, staff allowed to refund; else ``forbidden``, 403, before anything is read).
    Checked again in the decision's transaction, the member's rows locked until it commits
    (``access.hold_member``): a member removed or demoted, or their account switched off,
    while the rail's facts were read is refused the same way, and so, 401
    ``not_authenticated``, is a refund asked with the member token ``token_id`` (the staff
    API's) revoked meanwhile; nothing of it is written.

    ``kind`` is ``"full"`` (everything still refundable), ``"amount"`` (``amount``: more than
    zero, at most what remains, else ``exceeds_refundable`` naming the maximum) or
    ``"percentage"`` (``percentage`` of the order total; see :data:`ROUNDING_RULE`).
    ``reason`` must be an active leaf of ``site``'s reason tree. Raises ``SillError``:
    ``order_not_refundable`` (409) for PENDING, REFUNDED, CANCELLED or uncharged orders,
    ``order_changed`` (409) when ``expected`` no longer holds, ``rail_disabled`` (409),
    ``invalid_field`` / ``reason_not_leaf`` / ``reason_inactive`` / ``exceeds_refundable``
    (400). What remains counts the order's held refunds as spent (``refunds.quote``).
    Returns the refund as decided: processing (execution enqueued on commit), held for
    review, or rejected by policy.

    ``on_opened(refund)`` runs inside the decision transaction once the refund row exists;
    whatever it writes commits (or rolls back) with the refund, and an exception it raises
    undoes the refund (``refunds.staff.idempotency`` links its key to the refund this way).
    """
    require_member(actor, site.pk, Cap.REFUND)
    if kind not in KINDS:
        raise SillError(
            "Choose a full, fixed-amount or percentage refund.", code="invalid_field", field="kind"
        )
    now = now or timezone.now()
    note = (note or "").strip()
    # The rail's facts first, outside the transaction: its network calls must hold no lock.
    unlocked = charged_charge(order)
    rail_facts = (
        prefetch_rail_facts(
            site_id=site.pk, order=order, charge=unlocked, now=now, catch_up=catch_up_charge
        )
        if unlocked is not None and refusal_for(order, unlocked) is None
        else None
    )
    with transaction.atomic():
        # Still allowed now, and until this commits: the member's access was checked before
        # the rail's facts were read, which can take seconds, and an owner's change since
        # must not be refunded past (a later one waits for this decision). First: member
        # changes lock these rows before the site's audit chain, as the decision's append does.
        hold_member(actor, site.pk, Cap.REFUND, token_id=token_id)
        # The customer's other decisions first (the refunds they count are facts), then the
        # order, then its charge: the lock order of refunds.locks, on every refund path. An
        # order's customer is set when it is created and never changes.
        lock_decision_scope(agent_id=None, customer_id=order.customer_id)
        # Lock order then charge (the order every refund path uses) before reading amounts.
        locked = Order.objects.select_for_update().filter(site=site, pk=order.pk).first()
        if locked is None:
            raise SillError("No such order on this site.", code="not_found", status=404)
        charge = charged_charge(locked, lock=True)
        same_charge = unlocked is not None and charge is not None and unlocked.pk == charge.pk
        facts = rail_facts if same_charge else None
        quote = _quote(locked, charge, rail_facts=facts)
        charge, remaining = quote.charge, quote.remaining
        _check_snapshot(order=locked, remaining=remaining, expected=expected)
        hold_reason_tree()  # no delete of the reason until this refund commits
        picked = pickable_reason(site, reason.pk if isinstance(reason, RefundReason) else reason)
        refund_amount = _amount_for(
            kind=kind,
            order=locked,
            remaining=remaining,
            amount=amount,
            percentage=percentage,
            held=quote.held,
            rail=charge.rail,
        )
        _check_confirmed(order=locked, amount=refund_amount, expected=expected)
        # RailDisabled (409) if switched off or its stored key cannot be read.
        usable_rail_account(site_id=site.pk, rail=charge.rail)
        context = RefundContext(
            site=site,
            order=locked,
            charge=charge,
            amount=refund_amount,
            origin="staff",  # RefundOrigin.STAFF, as the Literal RefundContext.origin takes it
            agent=None,
            user=actor,
            reason=picked.code or None,
            now=now,
            rail_facts=facts,
        )
        fields = {
            "origin": RefundOrigin.STAFF,
            "requested_by": actor,
            "refund_reason": picked.reason,
            "reason_path": picked.path[:500],
            "reason_label": picked.reason.name,
            "reason_code": picked.code,
            "note": note,
        }
        refund = decide_and_open(context=context, fields=fields)
        if on_opened is not None:
            on_opened(refund)
    return refund


@dataclass(frozen=True)
class StaffQuote:
    """What a staff refund would be, as the form shows it before submitting."""

    amount: Money
    remaining: Money
    explanation: str


def quote_staff_refund(
    *,
    order: Order,
    charge: Charge | None,
    kind: str,
    amount: Money | None = None,
    percentage: Decimal | None = None,
    expected: OrderSnapshot | None = None,
) -> StaffQuote:
    """The concrete amount of a refund, without locks (for the preview; the real refund
    recomputes it under the row locks). Raises the same ``SillError``s as the refund would,
    ``order_changed`` included when ``expected`` (the order as the form showed it) no longer
    holds: a confirmation must not offer a refund that its submit is bound to refuse."""
    quote = _quote(order, charge)
    remaining = quote.remaining
    _check_snapshot(order=order, remaining=remaining, expected=expected)
    rail = quote.charge.rail
    value = _amount_for(
        kind=kind,
        order=order,
        remaining=remaining,
        amount=amount,
        percentage=percentage,
        held=quote.held,
        rail=rail,
    )
    if kind == "percentage" and percentage is not None:
        step = amount_step(rail, order.currency)
        result = percentage_of_total(
            total=order.total, percentage=percentage, remaining=remaining, step=step
        )
        explanation = (
            f"{percent_text(percentage)} of the {format_money(order.total)} order total is "
            f"{format_money(result.exact)}, rounded half up to "
            f"{format_money(Money(step, order.currency))}"
        )
        if step > 1:
            explanation += f" (the smallest amount {rail_label(rail)} refunds in {order.currency})"
        if result.capped:
            explanation += f"; capped at the {format_money(remaining)} left to refund"
    elif kind == "full":
        explanation = f"everything left to refund on this order ({format_money(remaining)})"
    else:
        explanation = f"{format_money(remaining)} is left to refund on this order"
    if quote.held is not None and quote.held.amount_minor:
        explanation += f", after the {format_money(quote.held)} awaiting approval"
    return StaffQuote(amount=value, remaining=remaining, explanation=explanation)
