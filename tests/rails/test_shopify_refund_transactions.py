"""A Shopify refund's state is read from all the transactions it takes, not the first five.

Seen before: each refund was read with ``transactions(first: 5)`` and nothing after them, and
its state came from those five. A refund whose first five transactions failed and whose sixth
succeeded read as failed: an outside refund of the order was recorded as no refund at all
(Sill held refundable what Shopify had refunded), and Sill's own settled refund was reversed
as "failed after settlement" and offered as refundable again. ``Refund.transactions`` is a
connection: the rest are now read on by cursor while none read so far succeeded.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from refunds.reconcile.runs import run_reconciliation
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.shopify.sync import sync_orders
from tests.rails.shopify_cost import MAX_COST, requested_cost
from tests.rails.test_shopify_refunds import _execute, _refund

pytestmark = pytest.mark.django_db


def _failed_five_times_first(shopify, refund: dict) -> None:
    """``refund``'s transactions: five failed attempts, then the one that succeeded."""
    succeeded = refund["transactions"][0]
    refund["transactions"][:] = [
        {"id": f"gid://shopify/OrderTransaction/{shopify.new_id()}", "status": "FAILURE",
         "kind": "REFUND"}
        for _ in range(5)
    ] + [succeeded]  # fmt: skip


def test_an_outside_refund_that_succeeded_after_five_failed_attempts_is_counted(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="Refunded in the Shopify admin")
    _failed_five_times_first(shopify, made)
    report = sync_orders(site=site)
    assert (report.created, report.outside_refunds) == (1, 1)
    outside = ExternalRefund.objects.get(provider_refund_id=made["id"])
    assert (outside.status, outside.counted_minor) == ("succeeded", 2000)
    assert Charge.objects.get(order__site=site).remaining.amount_minor == 4000
    # The rest of the refund's transactions were read by their cursor, within the cost limit.
    [(query, variables)] = [
        (q, v) for op, q, v in shopify.requests if op == "SillRefundTransactions"
    ]
    assert variables["id"] == made["id"] and requested_cost(query, variables) <= MAX_COST


def test_a_refund_sill_settled_that_succeeded_after_five_failed_attempts_is_not_reversed(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    placed = shopify.add_order(total="60.00")
    sync_orders(site=site)
    order = Order.objects.get(charges__provider_payment_id=str(placed.id))
    refund = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded"
    [made] = placed.refunds
    _failed_five_times_first(shopify, made)
    run = run_reconciliation(account_id=shopify_account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 0)
    refund = Refund.objects.get(pk=refund.pk)
    assert (refund.status, refund.reversed_at) == ("succeeded", None)
    assert Charge.objects.get(order=order).remaining.amount_minor == 0


def test_a_refund_recovered_by_lookup_after_five_failed_attempts_is_read_as_succeeded(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    placed = shopify.add_order(total="60.00")
    sync_orders(site=site)
    order = Order.objects.get(charges__provider_payment_id=str(placed.id))
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 0.5
    shopify.slow_after_refund_seconds = 2.0  # made, then answered too late
    with pytest.raises(RetryLater):
        execute_refund(refund.pk)
    [made] = placed.refunds
    _failed_five_times_first(shopify, made)
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    execute_refund(refund.pk)  # looks the refund up (SillRefunds) before sending anything
    refund.refresh_from_db()
    assert (refund.status, refund.provider_refund_id) == ("succeeded", made["id"])
    assert len(shopify.refund_creates()) == 1


def test_a_refund_whose_transactions_all_failed_is_still_read_as_failed(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="Refunded in the Shopify admin")
    _failed_five_times_first(shopify, made)
    made["transactions"][-1] = dict(made["transactions"][-1], status="FAILURE")
    sync_orders(site=site)
    outside = ExternalRefund.objects.get(provider_refund_id=made["id"])
    assert (outside.status, outside.counted_minor) == ("failed", 0)
    assert Charge.objects.get(order__site=site).remaining.amount_minor == 6000
