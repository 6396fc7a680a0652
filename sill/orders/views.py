from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sill.accounts.access import Cap, site_view
from sill.orders import selectors
from sill.orders.models import Order, OrderStatus

PAGE_SIZE = 25


@site_view(Cap.VIEW_ORDERS)
def dashboard(request: HttpRequest) -> HttpResponse:
    site = request.site_ctx.site
    recent = selectors.orders_for(site)[:8]
    figures = selectors.dashboard_figures(site)
    from refunds.reconcile.views import dashboard_attention

    context = {"recent": recent, "attention": dashboard_attention(request), **figures}
    return render(request, "orders/dashboard.html", context)


@site_view(Cap.VIEW_ORDERS)
def order_list(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "")[:200]
    status = request.GET.get("status", "")
    orders = selectors.orders_for(request.site_ctx.site, q=q, status=status)
    page = Paginator(orders, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "q": q,
        "status": status if status in OrderStatus.values else "",
        "statuses": OrderStatus.choices,
    }
    template = "orders/list.html#results" if request.htmx else "orders/list.html"
    return render(request, template, context)


def order_detail_context(
    request: HttpRequest, order: Order, *, tab: str = "overview", refund_form: Any = None
) -> dict[str, Any]:
    """What the order page shows; the refund POST view re-renders the page with it (422)."""
    from refunds.reconcile.views import attention_context
    from refunds.staff.views import refund_panel_context

    charges = list(order.charges.prefetch_related("disputes"))
    transactions = selectors.transactions_for(order)
    return {
        "order": order,
        "items": list(order.items.all()),
        "charges": charges,
        "transactions": transactions,
        "tab": tab,
        "attention": attention_context(
            request, refunds=[t.obj for t in transactions if t.kind == "refund"]
        ),
        "refund_panel": refund_panel_context(
            request, order=order, charges=charges, transactions=transactions, form=refund_form
        ),
    }


@site_view(Cap.VIEW_ORDERS)
def order_detail(request: HttpRequest, order_id: str) -> HttpResponse:
    order = selectors.order_for(request.site_ctx.site, order_id)
    tab = "transactions" if request.GET.get("tab") == "transactions" else "overview"
    context = order_detail_context(request, order, tab=tab)
    if request.htmx and request.htmx.target == "order-tab":
        return render(request, f"orders/detail.html#{tab}", context)
    return render(request, "orders/detail.html", context)
