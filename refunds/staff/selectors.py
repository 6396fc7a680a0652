"""Reads for the order page and the dashboard that join orders with their refunds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, Sum

from refunds.labels import (
    failure_line,
    outcome_label,
    outcome_words,
    rail_refund_state_label,
    refund_status_label,
)
from refunds.models import Refund, RefundKind, RefundStatus
from sill.accounts.models import Site
from sill.money import Money
from sill.orders.models import Order


@dataclass(frozen=True)
class Transaction:
    """One line of an order's Transactions tab: the charge, or a refund."""

    kind: str  # "charge" | "refund" | "external_refund" (made at the rail, outside Sill)
    at: datetime
    amount: Money
    status: str
    rail: str
    provider_id: str
    who: str
    detail: str
    obj: object
    # In words, as the rest of Sill says it (the refund page, the refund list): "Succeeded",
    # "Needs attention", "Failed after settlement", an outside refund's "Waiting for the buyer".
    status_label: str = ""
    reason: str = ""  # the merchant reason's path as it was (staff), or the agent's code
    note: str = ""
    decided_by: str = ""  # who approved or rejected a held refund
    requested_at: datetime | None = None


def _outside_detail(state: str) -> str:
    """Under an outside refund's badge: whether money moved (a failed or cancelled one at the
    rail refunded nothing, and Sill does not count it)."""
    if state in ("failed", "canceled"):
        return f"Nothing was refunded: the rail reports it {rail_refund_state_label(state).lower()}"
    return "Made at the rail, outside Sill"


def _refund_detail(refund: Refund) -> str:
    """Under a refund's badge: why it failed or needs attention in Sill's words then the
    rail's, as the banner above and the refund page say it; a rejection's or expiry's reason
    in words."""
    if refund.status in (RefundStatus.FAILED, RefundStatus.NEEDS_ATTENTION):
        return failure_line(*outcome_words(refund))
    return refund.failure_message or outcome_label(refund.outcome_code)


def transactions_for(order: Order) -> list[Transaction]:
    """The order's charges and refunds (Sill's and outside ones), newest first (three queries)."""
    rows: list[Transaction] = []
    charges = list(order.charges.prefetch_related("external_refunds"))
    for charge in charges:
        rows.append(
            Transaction(
                kind="charge",
                at=charge.captured_at or charge.created_at,
                amount=charge.amount,
                status=charge.status,
                rail=charge.rail,
                provider_id=charge.provider_charge_id or charge.provider_payment_id,
                who=order.buyer_name or order.buyer_email,
                detail=charge.failure_message,
                obj=charge,
                status_label=charge.get_status_display(),
            )
        )
    for charge in charges:
        for outside in charge.external_refunds.all():
            rows.append(
                Transaction(
                    kind="external_refund",
                    at=outside.created_at_rail,
                    amount=outside.amount,
                    status=outside.status,
                    rail=charge.rail,
                    provider_id=outside.provider_refund_id,
                    who="outside Sill",
                    detail=_outside_detail(outside.status),
                    obj=outside,
                    status_label=rail_refund_state_label(outside.status),
                    reason=outside.reason,
                )
            )
    for refund in order.refunds.select_related("agent", "requested_by", "decided_by"):
        if refund.agent is not None:
            who = refund.agent.agent_id
        elif refund.requested_by is not None:
            who = refund.requested_by.get_username()
        else:
            who = "outside Sill"
        rows.append(
            Transaction(
                kind="refund",
                at=refund.reversed_at or refund.settled_at or refund.created_at,
                amount=refund.amount,
                status=refund.status,
                rail=refund.rail,
                provider_id=refund.provider_refund_id,
                who=who,
                detail=_refund_detail(refund),
                obj=refund,
                status_label=refund_status_label(refund),
                reason=refund.reason_path or refund.reason_code,
                note=refund.note,
                decided_by=refund.decided_by.get_username() if refund.decided_by else "",
                requested_at=refund.created_at,
            )
        )
    rows.sort(key=lambda t: t.at, reverse=True)
    return rows


def dashboard_figures(site: Site) -> dict[str, object]:
    """Headline numbers for the dashboard, in one aggregate query per table."""
    orders = Order.objects.filter(site=site).aggregate(
        total=Count("id"),
        paid=Count("id", filter=Q(status__in=["PAID", "SHIPPED", "DELIVERED"])),
        refunded=Count("id", filter=Q(status__in=["PARTIALLY_REFUNDED", "REFUNDED"])),
    )
    refunds = Refund.objects.filter(site=site).aggregate(
        held=Count("id", filter=Q(status=RefundStatus.HELD)),
        processing=Count("id", filter=Q(status=RefundStatus.PROCESSING)),
        needs_attention=Count("id", filter=Q(status=RefundStatus.NEEDS_ATTENTION)),
        succeeded=Count("id", filter=Q(status=RefundStatus.SUCCEEDED)),
    )
    # Refunds of charges only: a customer credit returns no charge (the rail's refunds do not
    # have it), so "Refunded" counting it would match nothing an accountant reconciles with.
    by_currency = (
        Refund.objects.filter(site=site, status=RefundStatus.SUCCEEDED, kind=RefundKind.REFUND)
        .values("currency")
        .annotate(total=Sum("amount_minor"))
        .order_by("currency")
    )
    refunded = [Money(row["total"], row["currency"]) for row in by_currency]
    return {"orders": orders, "refunds": refunds, "refunded": refunded}
