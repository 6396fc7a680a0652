"""Many rows at once for the list pages (``bulk_create``): orders, refunds, audit records and
reconciliation items of one site, shaped as the pipeline writes them.

Shared by ``tests/refunds/test_list_query_counts.py`` and ``bench/lists.py``: the counts the
tests assert and the times the bench measures come from the same data.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.utils import timezone

from audit.models import AuditKind, AuditRecord
from refunds.models import (
    Decision,
    ReconciliationItem,
    ReconciliationKind,
    Refund,
    RefundOrigin,
    RefundStatus,
)
from sill.accounts.models import Agent, Site
from sill.ids import new_ulid
from sill.orders.models import Charge, ChargeStatus, LineItem, Order, OrderStatus, Rail

HOLDING_RULE = {
    "id": "r_hold_all",
    "action": "require_approval",
    "mode": "enforce",
    "title": "Hold every refund",
}


def make_orders(site: Site, n: int, *, tag: str = "") -> list[Order]:
    """``n`` paid orders of ``site``, newest last, each with one line and one mock charge."""
    now = timezone.now()
    prefix = tag or new_ulid()[-8:]
    orders = Order.objects.bulk_create(
        Order(
            id=f"ord_{prefix}{i:06d}",
            site=site,
            number=f"{prefix}-{i}",
            buyer_name=f"Buyer {i}",
            buyer_email=f"buyer{i}@example.com",
            status=OrderStatus.PAID,
            currency="USD",
            total_minor=8900,
        )
        for i in range(n)
    )
    # auto_now_add ignores a given created_at: spread the orders over time afterwards.
    for i, order in enumerate(orders):
        order.created_at = now - timedelta(minutes=n - i)
    Order.objects.bulk_update(orders, ["created_at"])
    LineItem.objects.bulk_create(
        LineItem(
            order=o, sku="SKU-1", name="Item", quantity=1, unit_price_minor=8900, currency="USD"
        )
        for o in orders
    )
    Charge.objects.bulk_create(
        Charge(
            order=o,
            rail=Rail.MOCK,
            provider_charge_id=f"ch_{o.pk}",
            amount_minor=8900,
            currency="USD",
            captured_at=o.created_at,
            status=ChargeStatus.SUCCEEDED,
        )
        for o in orders
    )
    return orders


def make_refunds(
    site: Site, orders: list[Order], *, statuses: tuple[str, ...], agent: Agent | None = None
) -> list[Refund]:
    """One refund per order, its status cycling through ``statuses`` (asked for by ``agent``
    when given, else by staff), each on its order's charge."""
    now = timezone.now()
    charges = {c.order_id: c for c in Charge.objects.filter(order__in=orders)}
    refunds = []
    for i, order in enumerate(orders):
        status = statuses[i % len(statuses)]
        held = status == RefundStatus.HELD
        refunds.append(
            Refund(
                id=f"rf_{order.pk[4:]}",
                site=site,
                order=order,
                charge=charges[order.pk],
                origin=RefundOrigin.AGENT if agent else RefundOrigin.STAFF,
                agent=agent,
                amount_minor=8900,
                currency="USD",
                rail=Rail.MOCK,
                decision=Decision.ESCALATED if held else Decision.APPROVED,
                status=status,
                outcome_code="rail_declined" if status == RefundStatus.FAILED else "",
                reason_code="wrong_item",
                rules=[HOLDING_RULE] if held else [],
                facts={"refundChargeAgeDays": 3},
                expires_at=now + timedelta(hours=24) if held else None,
                attention_since=now if status == RefundStatus.NEEDS_ATTENTION else None,
            )
        )
    made = Refund.objects.bulk_create(refunds)
    for i, refund in enumerate(made):
        refund.created_at = now - timedelta(minutes=len(made) - i)
    Refund.objects.bulk_update(made, ["created_at"])
    return made


def make_audit_records(site: Site, refunds: list[Refund]) -> list[AuditRecord]:
    """One decision record per refund, numbered on from the site's last record.

    Not signed or chained (Activity shows records; ``audit verify`` is not what is timed).
    """
    last = AuditRecord.objects.filter(site=site).order_by("-seq").first()
    start = last.seq if last else 0
    now = timezone.now()
    records = []
    for i, refund in enumerate(refunds, start=start + 1):
        body: dict[str, Any] = {
            "refund_id": refund.pk,
            "order_id": refund.order_id,
            "amount_minor": refund.amount_minor,
            "currency": refund.currency,
            "decision": "approved",
            "rules": [],
        }
        payload = {"site_id": site.pk, "seq": i, "kind": "approved", "body": body}
        records.append(
            AuditRecord(
                site=site,
                seq=i,
                kind=AuditKind.APPROVED,
                payload=json.dumps(payload, sort_keys=True, separators=(",", ":")),
                prev_hash=f"{i - 1:064x}",
                hash=f"{i:064x}",
                signature="s" * 86,
                key_id="bench",
                created_at=now - timedelta(seconds=len(refunds) - i),
                subject_refund_id=refund.pk,
                subject_order_id=refund.order_id or "",
            )
        )
    return AuditRecord.objects.bulk_create(records)


def make_open_items(site: Site, orders: list[Order]) -> list[ReconciliationItem]:
    """One open "at the rail, not in Sill" difference per order."""
    now = timezone.now()
    charges = {c.order_id: c for c in Charge.objects.filter(order__in=orders)}
    return ReconciliationItem.objects.bulk_create(
        ReconciliationItem(
            site=site,
            kind=ReconciliationKind.MISSING_IN_SILL,
            key=f"missing_in_sill:re_{o.pk}",
            order=o,
            charge=charges[o.pk],
            rail=Rail.MOCK,
            provider_refund_id=f"re_{o.pk}",
            currency="USD",
            rail_amount_minor=1000,
            rail_currency="USD",
            rail_status="succeeded",
            detail="The rail lists a refund Sill has no record of.",
            found_at=now - timedelta(minutes=i),
            last_seen_at=now,
        )
        for i, o in enumerate(orders)
    )


def fill_page(path: str, site: Site, agent: Agent, n: int) -> None:
    """``n`` more rows of what the list page ``path`` shows (``/held/``, ``/orders/``,
    ``/refunds/``, ``/activity/``, ``/reconcile/``)."""
    orders = make_orders(site, n)
    if path == "/held/":
        make_refunds(site, orders, statuses=(RefundStatus.HELD,), agent=agent)
    elif path == "/orders/":
        # Every refund state the order list flags, on most orders.
        states = (
            RefundStatus.HELD,
            RefundStatus.FAILED,
            RefundStatus.NEEDS_ATTENTION,
            RefundStatus.SUCCEEDED,
        )
        make_refunds(site, orders[: n - n // 5], statuses=states)
    elif path == "/refunds/":
        states = (RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.HELD)
        make_refunds(site, orders, statuses=states, agent=agent)
    elif path == "/activity/":
        make_audit_records(site, make_refunds(site, orders, statuses=(RefundStatus.SUCCEEDED,)))
    elif path == "/reconcile/":
        make_open_items(site, orders)
        make_refunds(site, orders, statuses=(RefundStatus.NEEDS_ATTENTION,))
