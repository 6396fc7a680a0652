"""Reads of orders, always scoped to a site."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http import Http404

from sill.accounts.models import Site
from sill.orders.models import (
    OPEN_DISPUTE_STATUSES,
    Charge,
    ChargeStatus,
    Dispute,
    Order,
    OrderStatus,
)


def orders_for(site: Site, *, q: str = "", status: str = "") -> QuerySet[Order]:
    """The site's orders, newest first, searchable by number, email or mandate id.

    No per-row annotations: a list pages over these and reads what it shows for its page's
    rows only (``refunds.staff.listing``), so nothing is computed for every order.
    """
    qs = Order.objects.filter(site=site).select_related("customer", "placed_by_agent")
    q = q.strip()
    if q:
        qs = qs.filter(
            Q(number__iexact=q.lstrip("#"))
            | Q(number__icontains=q)
            | Q(buyer_email__icontains=q)
            | Q(customer__email__icontains=q)
            | Q(source_mandate_id=q)
            | Q(id=q)
        )
    if status in OrderStatus.values:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at", "-id")


def order_for(site: Site, order_id: str) -> Order:
    """One order of ``site`` by its id or the purchase mandate that created it; else 404."""
    order = (
        Order.objects.filter(site=site)
        .filter(Q(id=order_id) | Q(source_mandate_id=order_id))
        .select_related("customer", "placed_by_agent", "site")
        .first()
    )
    if order is None:
        raise Http404("No such order on this site.")
    return order


def has_open_dispute(charge: Charge) -> bool:
    """Whether the buyer's bank is disputing ``charge``: refunding it too would pay twice."""
    return Dispute.objects.filter(charge=charge, status__in=OPEN_DISPUTE_STATUSES).exists()


def pending_charge_of(order: Order) -> Charge | None:
    """The order's pending charge, if any: a purchase has one (charging takes the oldest)."""
    return order.charges.filter(status=ChargeStatus.PENDING).order_by("created_at").first()


def attention_charges_for(site: Site) -> QuerySet[Charge]:
    """The site's charges that need attention, oldest first (one query with their orders)."""
    return (
        Charge.objects.filter(
            order__site=site, status=ChargeStatus.PENDING, attention_since__isnull=False
        )
        .select_related("order")
        .order_by("attention_since", "id")
    )
