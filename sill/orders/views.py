from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render

from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest
from sill.orders import selectors
from sill.orders.models import OrderStatus

PAGE_SIZE = 25


@site_view(Cap.VIEW_ORDERS)
def order_list(request: SiteRequest) -> HttpResponse:
    """``/orders/``, routed as ``orders:list`` from ``refunds.staff.urls`` with the order page."""
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
