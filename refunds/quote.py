"""The quote: what may be refunded for an order, from Sill's own records — or why nothing may.

Every refund path asks here: agent intake and staff refunds before deciding, an approval before
paying a held refund, and execution before calling the rail. :func:`quote_refund` runs the
refusals in one order and raises :class:`RefundRefused` with the first one's stable code
(DESIGN.md "The refund pipeline") and its words for the person who asked; a new rejection is
one more check here.

What remains refundable is the charge less every refund recorded on it: Sill's (settled, and
reserved while processing or needing attention) and those made outside Sill that the rail
reported. For a NEW refund, the charge's held refunds (awaiting approval) count too: nobody
can ask for what an approver may still pay out, so a $99 charge with $99 held offers nothing.
A held refund reserves nothing on the charge row until it is approved, so approving one checks
what remains without the holds (it is never blocked by the other holds of its order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from refunds.models import LIVE_STATUSES, RESERVED_STATUSES, Refund, RefundOrigin, RefundStatus
from sill.errors import SillError
from sill.money import Money, format_money
from sill.orders.models import (
    REFUND_BLOCKING_DISPUTE_STATUSES,
    REFUNDABLE_STATUSES,
    Charge,
    ChargeStatus,
    Dispute,
    DisputeStatus,
    Order,
    OrderStatus,
)
from sill.orders.outside import unrecorded_refunded_minor
from sill.outcomes import humanize
from sill.rails.base import RAIL_REFUND_WINDOW_DAYS, RailName, RefundFacts, rail_label
from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    account_unusable,
    site_account_moved,
    usable_rail_account,
)
from sill.rails.woocommerce import woocommerce_stripe_refusal
from sill.sql import Carried, cols, fetch_row, for_update, placeholders

# Rails whose credentials do not say whether they move real money: refunds need the charge's
# own facts to say it is a test (see live_refusal).
TEST_MODE_ONLY_RAILS = frozenset({RailName.SHOPIFY})

# Rails whose buyers may pay in another currency than the one Sill records and refunds (a
# Shopify multi-currency store refunds in the buyer's): refunds need the charge's own facts to
# say it was paid in that one (see presentment_refusal).
PRESENTMENT_CURRENCY_RAILS = frozenset({RailName.SHOPIFY})


@dataclass(frozen=True)
class Quote:
    """What can be refunded, from Sill's own records of the original."""

    order: Order
    charge: Charge
    # charged - refunded (by Sill or outside it) - reserved; for a new refund also - held.
    remaining: Money
    # What the charge's held refunds ask for (a new refund's quote only; zero otherwise).
    held: Money | None = None


class RefundRefused(SillError):
    """Nothing may be refunded as asked; ``code`` is the stable rejection code.

    ``message`` is in words for whoever asked (the staff form, the reviewer). ``order`` and
    ``charge`` are the original as far as it was found; ``dispute`` is the open or lost dispute
    that refused it, if that was the reason.
    """

    status = 409

    def __init__(
        self,
        message: str,
        *,
        code: str,
        order: Order | None = None,
        charge: Charge | None = None,
        dispute: Dispute | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.order = order
        self.charge = charge
        self.dispute = dispute


def charged_charge(order: Order, *, lock: bool = False, checks: bool = False) -> Charge | None:
    """The order's first successful charge: the original a refund goes back to.

    ``checks``: the same query also answers what :func:`quote_refund` asks of a new refund's
    other rows (an open dispute, an agent refund of the order already live, the charge's
    held refunds), so the quote reads them with the charge instead of one query each.
    """
    if checks:
        return _charge_with_checks(order, lock=lock)
    qs = Charge.objects.filter(order=order, status=ChargeStatus.SUCCEEDED).order_by("created_at")
    if lock:
        # Only the charge: the subqueries' rows are read, not locked.
        qs = qs.select_for_update(of=("self",))
    return qs.first()


def _charge_with_checks(order: Order, *, lock: bool) -> Charge | None:
    """:func:`charged_charge` with the quote's checks, in hand-written SQL (``sill.sql``: an
    agent decision runs it every time, and building the queryset cost more than running it).

    Sets ``quote_disputed`` (an open or lost dispute of the charge), ``quote_agent_refund``
    (an agent refund of the order held, processing, needing attention or done), ``quote_held_minor``
    and ``quote_held_count`` (the charge's held refunds). Only the charge is locked: the
    subqueries' rows are read, not locked.
    """
    charge = cols(Charge, "c")
    checks, params = _checks()
    row = fetch_row(
        # Formatted in: the model's column list and placeholders only (values are parameters).
        f"""SELECT {charge.sql}, {checks}
        FROM orders_charge c
        WHERE c.order_id = %s AND c.status = %s
        ORDER BY c.created_at
        LIMIT 1{for_update("c") if lock else ""}""",  # noqa: S608
        [*params, order.pk, ChargeStatus.SUCCEEDED],
    )
    if row is None:
        return None
    return _checked(charge.build(row), row[len(charge) :], order)


def locked_order_and_charge(
    site_id: str, order_id: str, *, also: Sequence[Carried] = ()
) -> tuple[Order | None, Charge | None, tuple[Any, ...] | None]:
    """The site's order ``order_id`` and its charge as ``charged_charge(order, lock=True,
    checks=True)`` reads it, both row-locked until the transaction ends: the order first,
    then the charge (the lock order of ``refunds.locks``). (None, None, None) without that
    order.

    One statement on PostgreSQL (an agent decision runs it every time: one round trip fewer
    than locking the order, then reading its charge): the order is locked in the sub-select
    the join starts from, the charge in the ``LATERAL`` one run for it, as the two statements
    would. An order another transaction holds is waited for in a statement of its own, and
    only then read with its checks, so that they count what its holder wrote. ``also``:
    values the same statement selects for the caller (the third item, one each in the order
    given; None when not selected). SQLite, which has no ``LATERAL`` (nor row locks: its
    writers are serialised), runs the two statements and selects nothing ``also`` asks.
    """
    order = cols(Order, "o")
    if connection.vendor != "postgresql":
        row = fetch_row(
            f"SELECT {order.sql} FROM orders_order o WHERE o.site_id = %s AND o.id = %s"  # noqa: S608
            + for_update(),
            [site_id, order_id],
        )
        if row is None:
            return None, None, None
        found = order.build(row)
        return found, charged_charge(found, lock=True, checks=True), None
    charge = cols(Charge, "c")
    checks, params = _checks()
    # Formatted in: the models' column lists, the caller's expression and placeholders.
    carried = ", ".join(c.sql for c in also) or "NULL"
    statement = f"""SELECT {order.sql}, {charge.sql}, {checks}, {carried}
        FROM (SELECT {order.sql} FROM orders_order o WHERE o.site_id = %s AND o.id = %s
              FOR UPDATE SKIP LOCKED) o
        LEFT JOIN LATERAL (
            SELECT {charge.sql} FROM orders_charge c
            WHERE c.order_id = o.id AND c.status = %s
            ORDER BY c.created_at
            LIMIT 1
            FOR UPDATE) c ON TRUE"""  # noqa: S608
    statement_params = [
        *params, *(p for c in also for p in c.params), site_id, order_id, ChargeStatus.SUCCEEDED,
    ]  # fmt: skip
    row = fetch_row(statement, statement_params)
    if row is None:
        # No such order, or another transaction holds its lock (SKIP LOCKED): the statement
        # above never waits for it. A statement that waits for a row lock reads the
        # locked row as the holder committed it, but its sub-selects (the quote's checks, the
        # agent's sum) as they were when it started: a dispute, an agent refund or a hold
        # the holder wrote would go unseen. Wait in a statement of its own, then read anew.
        if (
            fetch_row(
                "SELECT 1 FROM orders_order o WHERE o.site_id = %s AND o.id = %s FOR UPDATE",
                [site_id, order_id],
            )
            is None
        ):
            return None, None, None
        row = fetch_row(statement, statement_params)  # the lock is ours: nothing is skipped
        assert row is not None
    found = order.build(row)
    at = len(order)
    end = len(row) - max(len(also), 1)  # where the carried values start
    selected = tuple(row[end:]) if also else None
    if row[at] is None:  # the charge's id: the order has no successful charge
        return found, None, selected
    return found, _checked(charge.build(row, at), row[at + len(charge) : end], found), selected


def _checks() -> tuple[str, list[object]]:
    """The select list of the quote's checks of charge ``c`` (see :func:`_charge_with_checks`)
    and its parameters."""
    disputes, live = placeholders(REFUND_BLOCKING_DISPUTE_STATUSES), placeholders(LIVE_STATUSES)
    # Formatted in: placeholders only.
    sql = f"""EXISTS (SELECT 1 FROM orders_dispute d
                    WHERE d.charge_id = c.id AND d.status IN ({disputes})),
            EXISTS (SELECT 1 FROM refunds_refund r
                    WHERE r.order_id = c.order_id AND r.origin = %s AND r.status IN ({live})),
            (SELECT SUM(h.amount_minor) FROM refunds_refund h
             WHERE h.charge_id = c.id AND h.status = %s),
            (SELECT COUNT(*) FROM refunds_refund h WHERE h.charge_id = c.id AND h.status = %s)"""  # noqa: S608
    params: list[object] = [
        *sorted(REFUND_BLOCKING_DISPUTE_STATUSES),
        RefundOrigin.AGENT,
        *LIVE_STATUSES,
        RefundStatus.HELD,
        RefundStatus.HELD,
    ]
    return sql, params


def _checked(found: Charge, checks: tuple[object, ...] | list[object], order: Order) -> Charge:
    """``found`` with the answers of :func:`_checks` set on it, and its order."""
    disputed, agent_refund, held_minor, held_count = checks
    found.quote_disputed = bool(disputed)  # type: ignore[attr-defined]
    found.quote_agent_refund = bool(agent_refund)  # type: ignore[attr-defined]
    found.quote_held_minor = held_minor  # type: ignore[attr-defined]
    found.quote_held_count = held_count  # type: ignore[attr-defined]
    # The charge belongs to ``order``: the quote and the policy read it without a query.
    found.order = order
    return found


def open_dispute(charge: Charge) -> Dispute | None:
    """The buyer's bank's open or lost dispute of ``charge``, newest first: refunding would pay
    twice (the bank is taking the money back, or took it). A won dispute does not count.

    No query when ``charge`` was read with :func:`charged_charge`'s ``checks`` and has none.
    """
    if getattr(charge, "quote_disputed", None) is False:
        return None
    return (
        Dispute.objects.filter(charge=charge, status__in=REFUND_BLOCKING_DISPUTE_STATUSES)
        .order_by("-opened_at")
        .first()
    )


def quote_refund(
    *,
    order: Order | None,
    charge: Charge | None,
    origin: str | None = None,
    check_rail: bool = False,
    refund: Refund | None = None,
    rail_facts: RefundFacts | None = None,
    rail_account: RailAccount | None = None,
) -> Quote:
    """What may be refunded of ``order`` on ``charge``; else :class:`RefundRefused`.

    For a new refund, ``charge`` is the order's :func:`charged_charge`; the refusals, in
    order: no refundable original (``original_not_charged``, or ``already_executed`` for a
    REFUNDED order), an agent refund of this order already held, processing, needing attention
    or succeeded (``already_executed``, when ``origin`` is ``agent``), a charge of an account
    the site is no longer connected to (``rail_disabled``: a Shopify shop or a WooCommerce
    store the site switched away from, ``sill.rails.registry.account_moved``), the rail
    switched off or its stored API key unreadable (``rail_disabled``, when ``check_rail``:
    ``sill.rails.registry.usable_rail_account``), an open dispute (``disputed``),
    nothing left (``already_executed``), or nothing left once the charge's held refunds are
    counted (``exceeds_refundable``, naming what is awaiting approval). The quote's ``remaining`` is
    then net of those holds, and ``held`` is their sum.

    Again for ``refund``, already decided, before its money moves (an approval, an execution):
    ``charge`` is the refund's own. Its original was found when it was opened; what may have
    changed since is the charge and the site's rail, so the refusals are: the charge is no
    longer refundable (``exceeds_refundable``), a charge of an account the site is no longer
    connected to (``rail_disabled``), the rail switched off or its key unreadable
    (``rail_disabled``, when ``check_rail``: an approval), an open dispute (``disputed``),
    less left than the refund's amount (``exceeds_refundable``; a refund that reserved its
    amount counts it as its own).

    ``rail_facts``: what the rail reported when its facts were read (a new refund only).
    Anything it counts as refunded beyond Sill's records was refunded outside Sill and is not
    refundable again, even before Sill has recorded it; a charge whose refund would move real
    money is refused ``live_not_allowed`` (after ``rail_disabled``) unless ``SILL_ALLOW_LIVE``
    is set (:func:`live_refusal`), and a Shopify order the buyer paid in another currency than
    the shop's, or whose currency could not be read, ``currency_mismatch``
    (:func:`presentment_refusal`).

    ``rail_account``: the charge's enabled rail account, when the caller already read it
    (``check_rail`` and the account check then read nothing more; ``check_rail`` still asks
    whether its stored key opens, which costs nothing for an account without one).
    ``order.site`` is read for the refund window: callers that have the site set it on the
    order.

    Callers hold the order's and the charge's row locks when they act on the answer.
    """
    if refund is None:
        if (refused := original_refusal(order, charge)) is not None:
            raise refused
    elif charge is None or charge.status != ChargeStatus.SUCCEEDED:
        raise RefundRefused(
            "The original charge is no longer refundable.", code="exceeds_refundable"
        )
    assert order is not None and charge is not None
    if origin == RefundOrigin.AGENT and _live_agent_refund(order, charge):
        raise RefundRefused(
            f"An agent already asked for a refund of order #{order.number}: one per order.",
            code="already_executed",
            order=order,
            charge=charge,
        )
    # A WooCommerce order's charge is on Stripe (its order sync records it so): no other
    # rail's charge needs the look-up.
    if (
        refund is None
        and charge.rail == RailName.STRIPE
        and (needs_stripe := woocommerce_stripe_refusal(site_id=order.site_id, order_id=order.pk))
    ):
        raise RefundRefused(needs_stripe.message, code="rail_disabled", order=order, charge=charge)
    # A charge of a shop or store the site is no longer connected to (Shopify; WooCommerce,
    # whose charges are on Stripe): that account's alone.
    moved = site_account_moved(
        site_id=order.site_id,
        rail=charge.rail,
        provider_account=charge.provider_account,
        payment_account=charge.payment_account,
        known=rail_account,
    )
    if moved is not None:
        raise RefundRefused(moved.message, code="rail_disabled", order=order, charge=charge)
    if check_rail:
        # Switched off, live where live money is off, or its stored key no key opens: the
        # refund would fail at execution.
        try:
            if rail_account is None:
                usable_rail_account(site_id=order.site_id, rail=charge.rail)
            elif (unusable := account_unusable(rail_account)) is not None:
                raise unusable
        except RailDisabled as exc:
            raise RefundRefused(
                exc.message, code="rail_disabled", order=order, charge=charge
            ) from exc
    if (live := live_refusal(order, charge, rail_facts)) is not None:
        raise live
    if (paid_in := presentment_refusal(order, charge, rail_facts)) is not None:
        raise paid_in
    if (late := window_refusal(order, charge, rail_facts)) is not None:
        raise late
    if (dispute := open_dispute(charge)) is not None:
        raise RefundRefused(
            _disputed_words(order, refund, dispute),
            code="disputed",
            order=order,
            charge=charge,
            dispute=dispute,
        )
    remaining = charge.remaining
    rail_refunded = rail_facts.charge_refunded_minor if rail_facts is not None else None
    if unrecorded := unrecorded_refunded_minor(charge, rail_refunded):
        remaining = Money(max(0, remaining.amount_minor - unrecorded), remaining.currency)
    if refund is None and remaining.amount_minor <= 0:
        raise RefundRefused(
            f"Nothing is left to refund on order #{order.number}: "
            f"{format_money(charge.amount)} was charged and all of it is refunded or being "
            "refunded.",
            code="already_executed",
            order=order,
            charge=charge,
        )
    if refund is None:
        held, holds = held_total(charge)  # read with the charge when it has ``checks``
        if holds and remaining.amount_minor - held.amount_minor <= 0:
            raise RefundRefused(
                f"Nothing more can be refunded on order #{order.number} now: "
                f"{format_money(held)} is awaiting approval, which takes all of the "
                f"{format_money(remaining)} left of the {format_money(charge.amount)} charged. "
                f"Approve or reject the held refund{'s' if holds > 1 else ''} first; nothing "
                "was refunded.",
                code="exceeds_refundable",
                order=order,
                charge=charge,
            )
        return Quote(
            order=order,
            charge=charge,
            remaining=Money(remaining.amount_minor - held.amount_minor, remaining.currency),
            held=held,
        )
    own = refund.amount_minor if refund.status in RESERVED_STATUSES else 0
    # Unclamped (``Charge.remaining`` stops at zero): an outside refund recorded while this
    # refund held its reservation overlaps it, and only what is left beside both is this
    # refund's to send. Clamped, $20.00 refunded in the dashboard beside a $30.00 reservation
    # of a $40.00 charge left "$0 + $30.00 own" and the $30.00 went to the rail.
    left = (
        charge.amount_minor
        - charge.amount_refunded_minor
        - charge.amount_refunded_outside_minor
        - charge.amount_reserved_minor
        - unrecorded
        + own
    )
    if refund.amount_minor > left:
        remaining = Money(max(0, left), remaining.currency)
        raise RefundRefused(
            f"Only {remaining} of this charge is still refundable (it was refunded "
            f"since the request was held), less than the {refund.amount} held. "
            "Nothing was refunded.",
            code="exceeds_refundable",
            order=order,
            charge=charge,
        )
    return Quote(order=order, charge=charge, remaining=remaining)


def held_refunds(charge: Charge) -> list[Refund]:
    """The refunds of ``charge`` awaiting approval (status held), oldest first."""
    return list(
        Refund.objects.filter(charge=charge, status=RefundStatus.HELD).order_by("created_at", "id")
    )


def held_total(charge: Charge) -> tuple[Money, int]:
    """What the held refunds of ``charge`` ask for, in its currency, and how many there are
    (one query)."""
    if (count := getattr(charge, "quote_held_count", False)) is not False:
        held_minor = getattr(charge, "quote_held_minor", None)
        return Money(int(held_minor or 0), charge.currency), int(count or 0)
    found = Refund.objects.filter(charge=charge, status=RefundStatus.HELD).aggregate(
        total=Sum("amount_minor"), count=Count("id")
    )
    return Money(int(found["total"] or 0), charge.currency), int(found["count"])


def _live_agent_refund(order: Order, charge: Charge) -> bool:
    """Whether an agent refund of ``order`` is held, processing, needing attention or done."""
    if (known := getattr(charge, "quote_agent_refund", None)) is not None:
        return bool(known)
    return Refund.objects.filter(
        order=order, origin=RefundOrigin.AGENT, status__in=LIVE_STATUSES
    ).exists()


def live_refusal(
    order: Order, charge: Charge, rail_facts: RefundFacts | None
) -> RefundRefused | None:
    """``live_not_allowed`` when refunding ``charge`` would move real money and this
    deployment does not allow it (``SILL_ALLOW_LIVE``); else None.

    A rail on which a key does not say whether money is real (Shopify: only a development
    store's test orders are safe) is refused unless its facts say, for this charge, that it
    is not (``live_money is False``): a fact that could not be read refuses too.
    """
    if settings.SILL_ALLOW_LIVE or rail_facts is None:
        return None
    live = rail_facts.live_money
    if live is False or (live is None and charge.rail not in TEST_MODE_ONLY_RAILS):
        return None
    return RefundRefused(
        f"Order #{order.number} was paid with real money on {rail_label(charge.rail)}, and this "
        "Sill refunds only test orders on a development store (set SILL_ALLOW_LIVE=1 to allow "
        "live refunds). Nothing was refunded; refund it in the store's admin instead."
        if live
        else f"Sill could not confirm that order #{order.number} is a test order on a "
        f"development store, so it was not refunded on {rail_label(charge.rail)}. Nothing "
        "was refunded; try again, or refund it in the store's admin.",
        code="live_not_allowed",
        order=order,
        charge=charge,
    )


def presentment_refusal(
    order: Order, charge: Charge, rail_facts: RefundFacts | None
) -> RefundRefused | None:
    """``currency_mismatch`` when the buyer paid ``charge`` in another currency than the one
    Sill records and refunds; else None.

    A Shopify multi-currency store refunds an order in the buyer's (presentment) currency,
    while Sill's amounts are the shop's: such an order is refunded in Shopify, not by Sill.
    On such a rail a charge whose facts do not name the currency it was paid in is refused
    too (a fact that could not be read lets no money out); the rail checks it again before
    its refund call.
    """
    if rail_facts is None or charge.rail not in PRESENTMENT_CURRENCY_RAILS:
        return None
    paid_in = rail_facts.presentment_currency
    if paid_in == charge.currency:
        return None
    label = rail_label(charge.rail)
    return RefundRefused(
        f"Order #{order.number} was paid in {paid_in} at checkout, and Sill refunds "
        f"{label} orders only in the shop's currency ({charge.currency}): refund it in "
        f"{label}. Nothing was refunded."
        if paid_in
        else f"Sill could not read which currency order #{order.number} was paid in at "
        f"checkout, so it was not refunded on {label}: an order paid in another currency "
        f"than the shop's {charge.currency} is refunded in {label} only. Nothing was "
        f"refunded; try again, or refund it in {label}.",
        code="currency_mismatch",
        order=order,
        charge=charge,
    )


def window_refusal(
    order: Order, charge: Charge, rail_facts: RefundFacts | None, *, now: datetime | None = None
) -> RefundRefused | None:
    """``refund_window_passed`` when the payment is older than the merchant's own refund
    window (``Site.refund_window_days``, from Sill's record of the charge or the rail's date),
    or when the rail's facts date it further back than the rail lets a refund reach
    (``RAIL_REFUND_WINDOW_DAYS``: PayPal's 180 days); else None."""
    now = now or timezone.now()
    own = order.site.refund_window_days
    paid = (
        (rail_facts.charge_created_at if rail_facts is not None else None)
        or charge.captured_at
        or charge.created_at
    )
    if own and paid is not None and now - paid > timedelta(days=own):
        return RefundRefused(
            f"{order.site.name} refunds orders for {own} days after payment, and order "
            f"#{order.number} was paid on {paid:%b %-d, %Y}: offer the customer something "
            "else (store credit, a replacement), or change the refund window on Rules. "
            "Nothing was refunded.",
            code="refund_window_passed",
            order=order,
            charge=charge,
        )
    days = RAIL_REFUND_WINDOW_DAYS.get(charge.rail)
    paid_at = rail_facts.charge_created_at if rail_facts is not None else None
    if days is None or paid_at is None:
        return None
    if now - paid_at <= timedelta(days=days):
        return None
    label = rail_label(charge.rail)
    return RefundRefused(
        f"{label} refunds a payment for {days} days only, and order #{order.number} was paid "
        f"on {paid_at:%b %-d, %Y}: refund the buyer in {label} directly. Nothing was refunded.",
        code="refund_window_passed",
        order=order,
        charge=charge,
    )


def original_refusal(order: Order | None, charge: Charge | None) -> RefundRefused | None:
    """Why a new refund has no refundable original (in the staff form's words); else None.

    The first of :func:`quote_refund`'s refusals, and the only one that reads no rows.
    """
    if order is None:
        return RefundRefused("No such order on this site.", code="original_not_charged")
    if order.status not in REFUNDABLE_STATUSES:
        messages: dict[str, str] = {
            OrderStatus.PENDING: (
                f"Order #{order.number} is still pending: it hasn't been paid, so there is nothing "
                "to refund."
            ),
            OrderStatus.REFUNDED: (
                f"Order #{order.number} is already refunded in full; nothing is left to refund."
            ),
            OrderStatus.CANCELLED: (
                f"Order #{order.number} was cancelled; cancelled orders can't be refunded."
            ),
        }
        message = messages.get(
            order.status,
            f"Order #{order.number} is {order.get_status_display().lower()} and can't be refunded.",
        )
        if order.status == OrderStatus.REFUNDED and charge is not None:
            return RefundRefused(message, code="already_executed", order=order, charge=charge)
        return RefundRefused(message, code="original_not_charged", order=order)
    if charge is None:
        return RefundRefused(
            f"Order #{order.number} has no successful charge, so there is nothing to refund.",
            code="original_not_charged",
            order=order,
        )
    return None


def _disputed_words(order: Order, refund: Refund | None, dispute: Dispute) -> str:
    # The rail's reason code in words, as the order page shows it ("product not received").
    reason = humanize(dispute.reason).lower()
    if dispute.status == DisputeStatus.LOST:
        said = (
            f"The buyer's bank already returned {dispute.amount} of this charge to the buyer "
            f"(a dispute, {reason}, was lost): a refund would pay the buyer twice."
            if dispute.amount is not None
            else "The buyer's bank already returned money of this charge to the buyer (a "
            f"dispute, {reason}, was lost; its amount is not known): a refund would "
            "pay the buyer twice."
        )
        return (
            said
            if refund is None or refund.status == RefundStatus.HELD
            else ("a dispute of the charge was lost after the refund was approved: " + said)
        )
    if refund is None:  # the staff form
        return (
            f"The charge of order #{order.number} is disputed: the bank is already reversing "
            "it, so a refund would pay the buyer twice. Respond to the dispute instead."
        )
    if refund.status == RefundStatus.HELD:  # the reviewer approving it
        return (
            f"The buyer opened a dispute on this charge ({reason}, "
            f"{'amount not known' if dispute.amount is None else dispute.amount}). "
            "Refunding now could pay the buyer twice; respond to the dispute instead. "
            "Nothing was refunded."
        )
    # The refund's failure message: it was approved and is about to be executed.
    return "a dispute was opened on the charge after the refund was approved"
