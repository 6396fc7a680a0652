"""Computing a refund's facts at decision time: Sill's records, the rail, Sill's clock.

Nothing here comes from the caller: the agent or staff member named an order and maybe an
amount and a reason; the amount was quoted from Sill's records, and everything else is read
here. Charge and customer facts come from the rail that took the payment, through its
``read_refund_facts`` with the site's own credentials (the mock rail answers from Sill's
records). A read that fails, a rail that cannot read facts, or a guest checkout make those
facts unknown (``None``), never a default that would let money out.

See ``policies.vocabulary`` for the snapshot format.
"""

from __future__ import annotations

import logging
import zoneinfo
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import connection, transaction

from policies.rates import usd_minor
from policies.types import RefundContext
from policies.vocabulary import FACTS_VERSION, ratio, truncated
from refunds.models import LIVE_STATUSES, PERIOD_SECONDS, RefundOrigin
from sill import sql
from sill.accounts.models import Site
from sill.orders.models import REFUND_BLOCKING_DISPUTE_STATUSES, Charge, Customer, Dispute, Order
from sill.orders.outside import unrecorded_refunded_minor
from sill.rails.base import (
    RAIL_REFUND_WINDOW_DAYS,
    ChargeReader,
    RefundFacts,
    RefundFactsReader,
    RefundFactsRequest,
)
from sill.rails.models import RailAccount
from sill.sql import cols, fetch_row, placeholders

logger = logging.getLogger(__name__)

HISTORY_DAYS = 90
CUSTOMER_REFUNDS_DAYS = 30
HISTORY_PAGE = 100
_DAY = 86400
_LIVE = placeholders(LIVE_STATUSES)

# (site, rail, what) already logged by this process: say it once, at the first refund.
_logged: set[tuple[str, str, str]] = set()


class CatchUp(Protocol):
    """Brings Sill's books for ``charge`` up to date with what ``rail`` lists for it (its
    refunds and disputes), under ``event_id`` in the audit records, and says whether the
    disputes could be read. The refund core's is :func:`refunds.reconcile.inbox.catch_up_charge`:
    it also opens a Reconciliation item for each refund or dispute that Sill had missed, as a
    reconciliation run does."""

    def __call__(self, *, charge: Charge, rail: ChargeReader, event_id: str) -> bool: ...


def read_refund_facts(context: RefundContext) -> dict[str, Any]:
    """The JSON-safe fact snapshot of the refund ``context`` describes."""
    order, charge, amount, now = context.order, context.charge, context.amount, context.now
    rail = context.rail_facts
    if rail is None:
        rail = _read_rail(
            site_id=context.site.pk, charge=charge, customer=_customer(order.customer_id),
            currency=amount.currency, now=now,
        )  # fmt: skip

    refund_usd = usd_minor(amount.amount_minor, amount.currency)
    prior = (
        charge.amount_refunded_minor
        + charge.amount_refunded_outside_minor
        + charge.amount_reserved_minor
        # Refunded at the rail beyond Sill's records (made outside Sill, not reported yet).
        + unrecorded_refunded_minor(charge, rail.charge_refunded_minor)
    )
    agent_placed = bool(context.agent is not None and order.placed_by_agent_id == context.agent.pk)

    history_count: Any = None
    history_usd: Any = None
    if rail.history is not None:
        history = rail.history
        usd = usd_minor(history.refunded_minor, amount.currency)
        count = history.refunded_charges
        history_count = truncated(count) if history.truncated else count
        if usd is not None:
            history_usd = truncated(usd) if history.truncated else usd

    disputed = rail.charge_disputed
    if disputed is not True and _open_dispute_in_sill(charge):
        # Sill recorded a dispute (a webhook) the rail's answer does not show: disputed.
        disputed = True

    return {
        "factsVersion": FACTS_VERSION,
        "refundAmount": amount.amount_minor,
        "refundAmountUsd": refund_usd,
        "refundFraction": ratio(prior + amount.amount_minor, charge.amount_minor),
        "refundChargeAgeDays": _age_days(rail.charge_created_at, now),
        "refundWindowDaysLeft": _window_days_left(
            context.site,
            charge.rail,
            rail.charge_created_at or charge.captured_at or charge.created_at,
            now,
        ),
        "refundCustomerAgeDays": _age_days(rail.customer_created_at, now),
        "refundCustomerCount90d": history_count,
        "refundCustomerAmount90dUsd": history_usd,
        "refundCustomerRefunds30d": _customer_refunds(context, order.customer_id),
        "refundAgentTotalTodayUsd": _agent_total_today_usd(context, refund_usd),
        "refundDisputed": disputed,
        # A Shopify refund carries no reason (seed 002): its reason fact is always none.
        "refundReason": "none" if charge.rail == "shopify" else (context.reason or "none"),
        "refundOrigin": str(context.origin),
        "agentPlacedOriginal": agent_placed,
        "rail": charge.rail,
        "currency": amount.currency,
    }


def _customer(customer_id: int | None) -> Customer | None:
    if customer_id is None:
        return None
    # Hand-written (sill.sql): every decision on a customer's order reads it.
    customer = cols(Customer, "cu")
    row = fetch_row(
        f"SELECT {customer.sql} FROM orders_customer cu WHERE cu.id = %s",  # noqa: S608
        [customer_id],
    )
    return None if row is None else customer.build(row)


def prefetch_rail_facts(
    *,
    site_id: str,
    order: Order,
    charge: Charge,
    now: datetime,
    catch_up: CatchUp,
    account: RailAccount | None = None,
    charge_only: bool = False,
) -> RefundFacts:
    """The rail's facts for refunding ``charge``, read before the caller locks anything.

    Call it outside any transaction: the rail may make network calls (Stripe: up to three),
    which must not hold the order's row lock, or SQLite's write lock, while they wait.

    When the rail knows more than Sill — it counts more refunded than Sill recorded, or the
    charge is disputed and Sill has no open dispute — a refund or dispute was made outside
    Sill and its webhook has not arrived: the charge is brought up to date from the rail
    first (``catch_up``), so the quote counts it too, and the merchant sees what was missed in
    the Reconciliation inbox (a reconciliation run afterwards finds the books in order, so
    only this occasion can say that a webhook never came).

    ``account``: the site's enabled account for the charge's rail, when the caller read it.
    ``charge_only``: the charge's facts alone, not the customer's age and history (an
    approval needs only what the charge holds: one read at the rail instead of several).
    """
    customer = None if charge_only else _customer(order.customer_id)
    facts = _read_rail(
        site_id=site_id, charge=charge, customer=customer,
        currency=order.currency, now=now, account=account,
    )  # fmt: skip
    return _caught_up(site_id=site_id, charge=charge, facts=facts, catch_up=catch_up)


def _caught_up(
    *, site_id: str, charge: Charge, facts: RefundFacts, catch_up: CatchUp
) -> RefundFacts:
    from sill.rails.registry import rail_for

    behind = unrecorded_refunded_minor(charge, facts.charge_refunded_minor) > 0
    dispute_unseen = facts.charge_disputed is True and not _open_dispute_in_sill(charge)
    if not (behind or dispute_unseen):
        return facts
    try:
        rail = rail_for(
            site_id=site_id,
            rail=charge.rail,
            provider_account=charge.provider_account,
            payment_account=charge.payment_account,
        )
        if not isinstance(rail, ChargeReader):
            return facts
        disputes_read = catch_up(charge=charge, rail=rail, event_id=f"decision:{charge.pk}")
    except Exception as exc:
        # Not recorded: the facts still count the rail's figure (refundFraction) and the
        # quote caps the amount by it; the webhook or reconciliation records it later.
        _log_once(
            site_id, charge.rail, "sync", f"the charge could not be brought up to date: {exc}"
        )
        return facts
    if dispute_unseen and disputes_read:
        # Stripe's ``disputed`` stays true after a dispute is won: the listed disputes say
        # whether one is open.
        return replace(facts, charge_disputed=_open_dispute_in_sill(charge, fresh=True))
    return facts


def _read_rail(
    *,
    site_id: str,
    charge: Charge,
    customer: Customer | None,
    currency: str,
    now: datetime,
    account: RailAccount | None = None,
) -> RefundFacts:
    from sill.rails.registry import rail_for, rail_from_account, site_account_moved

    rail_name = charge.rail
    taken_on = charge.provider_account
    try:
        # A charge of a shop or store the site is no longer connected to (Shopify; WooCommerce,
        # whose charges are on Stripe) is asked about nowhere (RailDisabled): its facts are
        # unknown.
        if account is not None and account.rail == rail_name:
            moved = site_account_moved(
                site_id=site_id,
                rail=rail_name,
                provider_account=taken_on,
                payment_account=charge.payment_account,
                known=account,
            )
            if moved is not None:
                raise moved
            rail = rail_from_account(account)
        else:
            rail = rail_for(
                site_id=site_id,
                rail=rail_name,
                provider_account=taken_on,
                payment_account=charge.payment_account,
            )
        if not isinstance(rail, RefundFactsReader):
            _log_once(site_id, rail_name, "reader", "the rail cannot read refund facts")
            return RefundFacts()
        request = RefundFactsRequest(
            provider_charge_id=charge.provider_charge_id,
            currency=currency,
            history_since=now - timedelta(days=HISTORY_DAYS),
            provider_customer_id=customer.rail_customer_id if customer else "",
            sill_charge_id=charge.pk,
            sill_customer_id=customer.pk if customer else None,
            history_limit=HISTORY_PAGE,
        )
        if not connection.in_atomic_block:
            return rail.read_refund_facts(request)
        # A savepoint: a failed read inside the caller's transaction must not poison it.
        with transaction.atomic():
            return rail.read_refund_facts(request)
    except Exception as exc:
        # Any failure to read is an unknown fact, which rules treat restrictively; a refund
        # must not fail (or pass) because the provider could not be asked.
        _log_once(site_id, rail_name, "read", f"refund facts could not be read: {exc}")
        return RefundFacts()


def _open_dispute_in_sill(charge: Charge, *, fresh: bool = False) -> bool:
    """Whether Sill records an open or lost dispute of ``charge``
    (``REFUND_BLOCKING_DISPUTE_STATUSES``): from the charge itself when it was read with the
    quote's checks (``refunds.quote.charged_charge``), unless ``fresh``."""
    known = None if fresh else getattr(charge, "quote_disputed", None)
    if known is not None:
        return bool(known)
    return Dispute.objects.filter(
        charge_id=charge.pk, status__in=REFUND_BLOCKING_DISPUTE_STATUSES
    ).exists()


def _age_days(then: datetime | None, now: datetime) -> int | None:
    if then is None:
        return None
    return max(0, int((now - then).total_seconds()) // _DAY)


def _window_days_left(site: Site, rail: str, paid_at: datetime | None, now: datetime) -> int | None:
    """Days left in the tightest refund window that applies (the rail's, the merchant's)."""
    windows = [d for d in (RAIL_REFUND_WINDOW_DAYS.get(rail), site.refund_window_days) if d]
    age = _age_days(paid_at, now)
    if not windows or age is None:
        return None
    return max(0, min(windows) - age)


def _customer_refunds(context: RefundContext, customer_id: int | None) -> int | None:
    if customer_id is None:
        return None
    # Hand-written (sill.sql): every decision on a customer's order counts them. The join
    # leaves out refunds without an order (customer credits), as ``order__customer_id`` does.
    since = context.now - timedelta(days=CUSTOMER_REFUNDS_DAYS)
    row = fetch_row(
        f"""SELECT COUNT(*) FROM refunds_refund r
        JOIN orders_order o ON o.id = r.order_id
        WHERE r.site_id = %s AND o.customer_id = %s AND r.status IN ({_LIVE})
            AND r.created_at >= %s""",  # noqa: S608  (formatted in: placeholders only)
        [
            context.site.pk,
            customer_id,
            *LIVE_STATUSES,
            connection.ops.adapt_datetimefield_value(since),
        ],
    )
    return int(row[0]) if row is not None else 0


def _agent_total_today_usd(context: RefundContext, refund_usd: int | None) -> int | None:
    """This agent's refunds since local midnight, this one included, in US cents."""
    if context.origin != RefundOrigin.AGENT or context.agent is None or refund_usd is None:
        return None
    totals = context.agent_totals_today
    if totals is None:
        midnight = agent_day_start(context.site, context.now)
        totals = agent_live_totals(context.agent.pk, midnight)
        if totals is None:  # a midnight off the quarter-hours (no zone in use has one)
            totals = agent_live_refunds_since(context.site.pk, context.agent.pk, midnight)
    total = refund_usd
    for currency, minor in totals:
        usd = usd_minor(minor, currency)
        if usd is None:
            return None
        total += usd
    return total


def agent_day_start(site: Site, now: datetime) -> datetime:
    """The local midnight that began ``now``'s day in the site's zone (UTC if the site's zone
    is unknown): where an agent's refunds "today" start."""
    try:
        tz = zoneinfo.ZoneInfo(site.timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        tz = zoneinfo.ZoneInfo("UTC")
    # fold=0: in the hour a zone repeats when its clocks go back to midnight (Havana, the
    # Azores), ``now`` is the second 00:xx (fold=1); its day began at the first midnight.
    return now.astimezone(tz).replace(hour=0, minute=0, second=0, microsecond=0, fold=0)


def agent_live_totals(agent_id: int, since: datetime) -> list[tuple[str, int]] | None:
    """The agent's live refunds created at or after ``since``, summed by currency, from the
    quarter-hour totals the database keeps (``refunds.models.AgentRefundTotal``): a few
    rows, however many refunds the agent made. None when ``since`` does not start a
    quarter-hour (the totals cannot split one). A currency whose refunds all stopped counting
    is left out, as it is when counted from the refunds."""
    period = _period(since)
    if period is None:
        return None
    # Hand-written (sill.sql): every agent decision reads it.
    with sql.cursor() as cursor:
        cursor.execute(_TOTALS, [agent_id, period])
        # int(): PostgreSQL's SUM of a bigint is a numeric (a Decimal), as the ORM converts.
        return [(currency, int(minor or 0)) for currency, minor in cursor.fetchall()]


def agent_live_totals_select(agent_id: int, since: datetime) -> sql.Carried | None:
    """:func:`agent_live_totals` as one value another statement selects (the agent intake's
    order lock carries it: no round trip of its own); :func:`agent_totals_from` reads it.
    None when ``since`` does not start a quarter-hour."""
    period = _period(since)
    if period is None:
        return None
    return sql.Carried(
        # One text value, "USD 700,EUR 300" ('' for none). Formatted in: the constant below.
        "COALESCE((SELECT string_agg(x.currency || ' ' || x.minor, ',')"  # noqa: S608
        f" FROM ({_TOTALS}) x), '')",
        (agent_id, period),
    )


def agent_totals_from(value: str) -> list[tuple[str, int]]:
    """The sums :func:`agent_live_totals_select` selected, as :func:`agent_live_totals` gives
    them."""
    sums = (part.partition(" ") for part in value.split(",") if part)
    return [(currency, int(minor)) for currency, _, minor in sums]


_TOTALS = """SELECT t.currency, SUM(t.amount_minor) AS minor FROM refunds_agentrefundtotal t
            WHERE t.agent_id = %s AND t.period >= %s
            GROUP BY t.currency HAVING SUM(t.amount_minor) <> 0"""


def _period(since: datetime) -> int | None:
    """The quarter-hour ``since`` starts (the totals' ``period``), or None if it starts none."""
    seconds = int(since.timestamp())
    if since.microsecond or seconds % PERIOD_SECONDS:
        return None
    return seconds // PERIOD_SECONDS


def agent_live_refunds_since(site_id: str, agent_id: int, since: datetime) -> list[tuple[str, int]]:
    """The same sums counted from the refunds themselves (every one since ``since``)."""
    with sql.cursor() as cursor:
        cursor.execute(
            f"""SELECT r.currency, SUM(r.amount_minor) FROM refunds_refund r
            WHERE r.site_id = %s AND r.agent_id = %s AND r.status IN ({_LIVE})
                AND r.created_at >= %s
            GROUP BY r.currency""",  # noqa: S608  (formatted in: placeholders only)
            [site_id, agent_id, *LIVE_STATUSES, connection.ops.adapt_datetimefield_value(since)],
        )
        return [(currency, int(minor or 0)) for currency, minor in cursor.fetchall()]


def _log_once(site_id: str, rail: str, what: str, message: str) -> None:
    key = (site_id, rail, what)
    if key in _logged:
        return
    _logged.add(key)
    logger.warning("site %s, %s rail: %s", site_id, rail, message)
