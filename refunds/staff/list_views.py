"""The order list (``orders:list``) and the refund list (``refunds:list``), with CSV export.

Both read ``?q=&status=&from=&to=`` (``listing.ListFilters``), page by 25 with bounded work
(``sill.paging.BoundedPaginator``: a capped count; the order list pages over ids and reads
each order's rail and refund state for its page's 25 orders only) and answer ``?format=csv``
with every matching row, streamed, under the same filters. The order list
lives here rather than in ``sill.orders`` because it shows each order's refund state
(``sill`` never imports ``refunds``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.db.models import QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from refunds.labels import (
    reason_label,
    refund_outcome_label,
    refund_status_label,
    requester_label,
)
from refunds.models import Decision, Refund, RefundStatus
from refunds.staff.csv_export import csv_response, iso_time, money_cells
from refunds.staff.listing import (
    REFUND_FILTERS,
    REFUND_STATUS_FILTERS,
    ListFilters,
    order_page_rows,
    order_statuses,
    orders_matching,
    orders_with_refund_state,
    refunds_for,
    with_decision_time,
)
from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest
from sill.orders.models import Order, OrderStatus
from sill.paging import BoundedPaginator
from sill.rails.base import rail_label

PAGE_SIZE = 25
CSV_CHUNK = 500
ORDER_CSV_HEADER = [
    "Order", "Placed", "Buyer", "Email", "Rail", "Status", "Refunds", "Total", "Currency",
    "Order id",
]  # fmt: skip
REFUND_CSV_HEADER = [
    "Requested", "Order", "Origin", "Status", "Outcome", "What happened", "Amount", "Currency",
    "Rail", "Reason", "Requested by", "Decided by", "Decided", "Settled", "Provider refund id",
    "Refund id", "Kind", "Credited customer",
]  # fmt: skip


def _wants_csv(request: SiteRequest) -> bool:
    return request.GET.get("format") == "csv"


def _stamp() -> str:
    return timezone.localtime().strftime("%Y%m%d-%H%M")


# --- orders -----------------------------------------------------------------------------------


def _order_refund_state(order: Order) -> str:
    if getattr(order, "refund_attention", False):
        return "Refund needs attention"
    if getattr(order, "refund_failed", False):
        return "Refund failed"
    if getattr(order, "refund_held", False):
        return "Refund held"
    return ""


def _order_rows(request: SiteRequest, orders: QuerySet[Order]) -> Iterator[list[object]]:
    zone = request.site_ctx.site.zone
    for order in orders.iterator(chunk_size=CSV_CHUNK):
        rail = getattr(order, "rail", "")  # annotated: the first charge's rail
        yield [
            order.number,
            iso_time(order.created_at, zone),
            order.buyer_name,
            order.buyer_email,
            rail_label(rail) if rail else "",
            order.get_status_display(),
            _order_refund_state(order),
            *money_cells(order.total),
            order.id,
        ]


@require_safe
@site_view(Cap.VIEW_ORDERS)
def order_list(request: SiteRequest) -> HttpResponse | StreamingHttpResponse:
    site = request.site_ctx.site
    filters = ListFilters.parse(request.GET, statuses=order_statuses())
    if _wants_csv(request):
        return csv_response(
            filename=f"orders-{_stamp()}.csv",
            header=ORDER_CSV_HEADER,
            rows=_order_rows(request, orders_with_refund_state(site, filters)),
        )
    # Page over the ids alone; the page's 25 orders are then read with their refund state.
    page = BoundedPaginator(
        orders_matching(site, filters).values_list("pk", flat=True),
        PAGE_SIZE,
        rows=lambda ids: order_page_rows(site, ids),
    ).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "filters": filters,
        "q": filters.q,
        "status": filters.status,
        "statuses": OrderStatus.choices,
        "refund_filters": list(REFUND_FILTERS.items()),
    }
    template = "orders/list.html#results" if request.htmx else "orders/list.html"
    return render(request, template, context)


# --- refunds ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefundRow:
    """One line of the refund list, in words."""

    refund: Refund
    status_label: str
    outcome: str  # the outcome code in words
    detail: str  # the rail's own message, when it says more
    reason: str
    requester: str
    link: str


def refund_row(refund: Refund, *, can_view_held: bool) -> RefundRow:
    if refund.status == RefundStatus.HELD and can_view_held:
        link = reverse("refunds:held-detail", args=[refund.pk])
    elif refund.order_id:
        link = reverse("orders:detail", args=[refund.order_id])
    elif refund.is_credit:
        link = reverse("refunds:detail", args=[refund.pk])
    else:
        link = ""
    return RefundRow(
        refund=refund,
        status_label=refund_status_label(refund),
        outcome=refund_outcome_label(refund),
        detail=refund.failure_message,
        reason=reason_label(refund),
        # An agent by its name (its id is internal); a person by their login.
        requester=(refund.agent.name or refund.agent.agent_id)
        if refund.agent is not None
        else requester_label(refund),
        link=link,
    )


def _decision_cells(refund: Refund, zone: ZoneInfo) -> list[str]:
    """``Decided by`` and ``Decided``: the person who decided a held refund, and when (or the
    expiry's time); ``rules`` and the decision record's time for one the rules approved or
    rejected (the dashboard's "Approved by the rules"); empty while it is held."""
    if refund.decided_by is not None or refund.status == RefundStatus.EXPIRED:
        by = refund.decided_by.get_username() if refund.decided_by is not None else ""
        return [by, iso_time(refund.decided_at, zone)]
    if refund.decision in (Decision.APPROVED, Decision.REJECTED):
        return ["rules", iso_time(getattr(refund, "decision_recorded_at", None), zone)]
    return ["", ""]


def _refund_csv_rows(request: SiteRequest, refunds: QuerySet[Refund]) -> Iterator[list[object]]:
    zone = request.site_ctx.site.zone
    for refund in refunds.iterator(chunk_size=CSV_CHUNK):
        yield [
            iso_time(refund.created_at, zone),
            refund.order.number if refund.order else "",
            refund.get_origin_display(),
            refund_status_label(refund),
            refund_outcome_label(refund),
            refund.failure_message,
            *money_cells(refund.amount),
            rail_label(refund.rail) if refund.rail else "",
            reason_label(refund),
            requester_label(refund),
            *_decision_cells(refund, zone),
            iso_time(refund.settled_at, zone),
            refund.provider_refund_id,
            refund.id,
            refund.get_kind_display(),
            refund.customer.rail_customer_id if refund.is_credit and refund.customer else "",
        ]


@require_safe
@site_view(Cap.VIEW_ORDERS)
def refund_list(request: SiteRequest) -> HttpResponse | StreamingHttpResponse:
    """``/refunds/``: every refund of the site, newest first, filterable and exportable."""
    ctx = request.site_ctx
    filters = ListFilters.parse(request.GET, statuses=set(REFUND_STATUS_FILTERS))
    refunds = refunds_for(ctx.site, filters)
    if _wants_csv(request):
        return csv_response(
            filename=f"refunds-{_stamp()}.csv",
            header=REFUND_CSV_HEADER,
            rows=_refund_csv_rows(request, with_decision_time(refunds)),
        )
    page = BoundedPaginator(refunds, PAGE_SIZE).get_page(request.GET.get("page"))
    can_view_held = ctx.can(Cap.VIEW_HELD)
    context = {
        "page": page,
        "rows": [refund_row(r, can_view_held=can_view_held) for r in page.object_list],
        "filters": filters,
        "statuses": list(REFUND_STATUS_FILTERS.items()),
    }
    template = "refunds/list.html#results" if request.htmx else "refunds/list.html"
    return render(request, template, context)
