"""Reads for the order and refund lists: filters, refund state per order, always per site.

``ListFilters.parse`` reads ``?q=&status=&from=&to=`` once for the page, its CSV export and
its pager. ``from`` and ``to`` are days in the site's time zone, both included.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import QueryDict

from audit.models import AuditRecord
from refunds.models import Refund, RefundKind, RefundStatus
from sill.accounts.models import Site
from sill.days import day_bounds
from sill.orders.models import Charge, Order, OrderStatus
from sill.orders.selectors import orders_for

# The order list's refund filters, next to the order statuses in one ``status`` picker.
REFUND_FILTERS: dict[str, str] = {
    "refund_failed": "Refund failed",
    "refund_attention": "Refund needs attention",
    "refund_held": "Refund held",
}
# The refund list's status picker: "failures" is failed or needs attention.
REFUND_STATUS_FILTERS: dict[str, str] = {
    "failures": "Failed or needs attention",
    "failed_open": "Failed, not refunded again",
    **{s.value: str(s.label) for s in RefundStatus},
}
# A refund asked for after one failed supersedes it: the failure is no longer a to-do.
SUPERSEDING = (RefundStatus.PROCESSING, RefundStatus.NEEDS_ATTENTION, RefundStatus.SUCCEEDED)


@dataclass(frozen=True)
class ListFilters:
    q: str = ""
    status: str = ""
    origin: str = ""
    date_from: date | None = None
    date_to: date | None = None
    error: str = ""

    @classmethod
    def parse(cls, params: QueryDict, *, statuses: set[str]) -> ListFilters:
        errors = []
        days: list[date | None] = []
        for name, label in (("from", "From"), ("to", "To")):
            raw = params.get(name, "").strip()
            try:
                days.append(date.fromisoformat(raw) if raw else None)
            except ValueError:
                days.append(None)
                errors.append(f"{label} is not a date (use YYYY-MM-DD); it was left out.")
        status = params.get("status", "")
        origin = params.get("origin", "")
        return cls(
            q=params.get("q", "")[:200].strip(),
            status=status if status in statuses else "",
            origin=origin if origin in ("agent", "staff") else "",
            date_from=days[0],
            date_to=days[1],
            error=" ".join(errors),
        )

    @property
    def active(self) -> bool:
        return bool(self.q or self.status or self.origin or self.date_from or self.date_to)

    def query(self, **extra: Any) -> str:
        """The filters as a query string (for the pager and the CSV link)."""
        pairs = {
            "q": self.q,
            "status": self.status,
            "origin": self.origin,
            "from": self.date_from.isoformat() if self.date_from else "",
            "to": self.date_to.isoformat() if self.date_to else "",
            **{k: str(v) for k, v in extra.items()},
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def window(self, site: Site) -> Q:
        """``created_at`` within the days, in the site's zone (``to`` is included)."""
        start, end = day_bounds(self.date_from, self.date_to, site.zone)
        q = Q()
        if start is not None:
            q &= Q(created_at__gte=start)
        if end is not None:
            q &= Q(created_at__lt=end)
        return q


def order_statuses() -> set[str]:
    return set(OrderStatus.values) | set(REFUND_FILTERS)


def failed_since(refund: Refund) -> datetime:
    """From when a failed refund is a failure to act on: when it was asked for, or, for one
    the rail reported failed after it was settled, when that was reported (a refund asked for
    in between was not asked for again in its place). :func:`superseded` reads it in SQL."""
    return refund.reversed_at or refund.created_at


def superseded() -> Exists:
    """For a refund (``OuterRef``): a refund of its order asked for after
    :func:`failed_since` is moving or moved money; for a customer credit, a later credit of
    its customer (a credit names no order, and its failure email says to ask for the credit
    again). A refund names no customer, a credit no order: NULL matches nothing, so neither
    side ever matches the other kind."""
    return Exists(
        Refund.objects.filter(
            Q(order=OuterRef("order")) | Q(customer=OuterRef("customer")),
            created_at__gt=Coalesce(OuterRef("reversed_at"), OuterRef("created_at")),
            status__in=SUPERSEDING,
        )
    )


def open_failure() -> Q:
    """A failed refund still to act on: no later refund :func:`superseded` it, its order
    has something left to refund, and nobody marked it handled (refunds.staff.handled). An
    order refunded in full since, through Sill or outside it (the rail refused Sill's refund
    ``already_refunded``: the buyer was refunded in its dashboard), leaves nothing to refund,
    so no refund could ever supersede the failure. A customer credit names no order: only a
    later credit replaces its failure."""
    return (
        Q(status=RefundStatus.FAILED, failure_handled_at__isnull=True)
        & ~superseded()
        & ~Q(order__status=OrderStatus.REFUNDED)
    )


def _open_failure() -> Exists:
    """An :func:`open_failure` of the order (``OuterRef``)."""
    return Exists(Refund.objects.filter(open_failure(), order=OuterRef("pk")))


def _refund_state_filters() -> dict[str, Exists]:
    return {
        "refund_failed": _open_failure(),
        "refund_attention": Exists(
            Refund.objects.filter(order=OuterRef("pk"), status=RefundStatus.NEEDS_ATTENTION)
        ),
        "refund_held": Exists(
            Refund.objects.filter(order=OuterRef("pk"), status=RefundStatus.HELD)
        ),
    }


def orders_matching(site: Site, filters: ListFilters) -> QuerySet[Order]:
    """The site's orders under ``filters`` (newest first), without per-row annotations:
    ``status`` may be an order status or one of ``REFUND_FILTERS`` (a filter, not a column)."""
    order_status = filters.status if filters.status in OrderStatus.values else ""
    qs = orders_for(site, q=filters.q, status=order_status).filter(filters.window(site))
    if filters.status in REFUND_FILTERS:
        qs = qs.filter(_refund_state_filters()[filters.status])
    return qs


def with_refund_state(orders: QuerySet[Order]) -> QuerySet[Order]:
    """``orders``, each with ``rail`` (its first charge's) and the ``refund_failed``,
    ``refund_attention`` and ``refund_held`` flags: per-row subqueries, for a page of rows."""
    first_rail = Charge.objects.filter(order=OuterRef("pk")).order_by("created_at", "id")
    return orders.annotate(rail=Subquery(first_rail.values("rail")[:1]), **_refund_state_filters())


def orders_with_refund_state(site: Site, filters: ListFilters) -> QuerySet[Order]:
    """:func:`orders_matching`, annotated by :func:`with_refund_state` (the CSV export, and
    short lists that slice it)."""
    return with_refund_state(orders_matching(site, filters))


def order_page_rows(site: Site, ids: list[str]) -> list[Order]:
    """The orders ``ids`` (one page of :func:`orders_matching`), in that order, annotated:
    one query over those rows only."""
    found = {
        order.pk: order
        for order in with_refund_state(
            Order.objects.filter(site=site, pk__in=ids).select_related(
                "customer", "placed_by_agent"
            )
        )
    }
    return [found[pk] for pk in ids if pk in found]


def with_decision_time(refunds: QuerySet[Refund]) -> QuerySet[Refund]:
    """``refunds``, each with ``decision_recorded_at``: when its decision record
    (``decision_hash``, one row by the unique (site, hash) index) was written. ``decided_at``
    is a person's decision (or the expiry) of a held refund alone; a refund the rules
    decided has its time here, as its page's timeline shows it."""
    recorded = AuditRecord.objects.filter(site=OuterRef("site"), hash=OuterRef("decision_hash"))
    return refunds.annotate(decision_recorded_at=Subquery(recorded.values("created_at")[:1]))


def refunds_for(site: Site, filters: ListFilters) -> QuerySet[Refund]:
    """The site's refunds, newest first, with their order, agent and requester (one query)."""
    qs = Refund.objects.filter(site=site).select_related(
        "order", "agent", "requested_by", "decided_by", "customer"
    )
    if filters.status == "failures":
        qs = qs.filter(status__in=[RefundStatus.FAILED, RefundStatus.NEEDS_ATTENTION])
    elif filters.status == "failed_open":
        qs = qs.filter(open_failure())
    elif filters.status:
        qs = qs.filter(status=filters.status)
    if filters.origin:
        qs = qs.filter(origin=filters.origin)
    if filters.q:
        q = filters.q
        qs = qs.filter(
            Q(order__number__iexact=q.lstrip("#"))
            | Q(order__buyer_email__icontains=q)
            | Q(customer__email__icontains=q, kind=RefundKind.CUSTOMER_CREDIT)
            | Q(customer__rail_customer_id=q, kind=RefundKind.CUSTOMER_CREDIT)
            | Q(id=q)
            | Q(provider_refund_id=q)
        )
    return qs.filter(filters.window(site)).order_by("-created_at", "-id")
