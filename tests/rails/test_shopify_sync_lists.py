"""Shopify order sync of orders longer than one read: every line item, capture and refund of
an order comes in, and an order with more than Shopify lists is never recorded as if whole.

Seen before: the order query read ``lineItems(first: 100)``, ``transactions(first: 50)`` and
``refunds(first: 50)`` and nothing after them, so a 60th refund made in the Shopify admin was
never counted and Sill held more of the order refundable than Shopify would refund.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.base import RailError
from sill.rails.shopify.rail import LISTS_MAX
from sill.rails.shopify.sync import sync_orders

pytestmark = pytest.mark.django_db


def _captured_in_parts(shopify, placed, parts: int) -> None:
    """``placed``'s payment as ``parts`` captures of 1.00 each."""
    first = placed.transactions[0]
    first.update(kind="CAPTURE", amount=Decimal("1.00"))
    for _ in range(parts - 1):
        placed.transactions.append(
            dict(first, id=f"gid://shopify/OrderTransaction/{shopify.new_id()}")
        )


def _refunded_in_parts(shopify, placed, parts: int) -> None:
    for _ in range(parts):
        shopify._make_refund(placed, Decimal("0.50"), note="Refunded in the Shopify admin")


def test_it_brings_in_every_line_item_of_an_order_longer_than_a_page(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="130.00")
    placed.lines = [(f"SKU-{i}", f"Item {i}", 1, Decimal("1.00")) for i in range(130)]
    assert sync_orders(site=site).created == 1
    order = Order.objects.get(site=site)
    assert sorted(order.items.values_list("sku", flat=True)) == sorted(
        f"SKU-{i}" for i in range(130)
    )
    assert sum(1 for op, _ in shopify.calls if op == "SillOrderLines") == 1


def test_it_counts_every_capture_of_an_order_captured_in_more_parts_than_a_page_lists(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="60.00")
    _captured_in_parts(shopify, placed, 60)
    assert sync_orders(site=site).created == 1
    assert Charge.objects.get(order__site=site).amount_minor == 6000


def test_it_records_every_refund_of_an_order_refunded_more_times_than_a_page_lists(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="100.00")
    _refunded_in_parts(shopify, placed, 60)
    report = sync_orders(site=site)
    assert (report.created, report.outside_refunds) == (1, 60)
    charge = Charge.objects.get(order__site=site)
    assert charge.amount_refunded_outside_minor == 3000
    assert charge.remaining.amount_minor == 7000


@pytest.mark.parametrize("cut", ["refunds", "transactions"])
def test_an_order_with_more_than_shopify_lists_is_not_brought_in_and_is_named(
    site, shopify, shopify_account, capsys, cut
):
    placed = shopify.add_order(total="300.00")
    if cut == "refunds":
        _refunded_in_parts(shopify, placed, 260)
    else:
        _captured_in_parts(shopify, placed, 260)
    shopify.add_order(total="20.00")
    call_command("rails", "sync-shopify", "--site", site.pk)
    out = capsys.readouterr().out
    assert "1 created" in out and "1 not recorded whole" in out
    assert placed.gid in out and f"{LISTS_MAX[cut]} {cut}" in out
    assert not Order.objects.filter(charges__provider_payment_id=str(placed.id)).exists()
    assert not ExternalRefund.objects.exists()


def test_an_order_sill_holds_that_passes_what_shopify_lists_gets_the_refunds_read_and_no_more(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="300.00")
    assert sync_orders(site=site).created == 1
    _refunded_in_parts(shopify, placed, 255)
    report = sync_orders(site=site)
    # Each refund read is Shopify's, so counting it only lowers what Sill holds refundable;
    # the order is not counted as updated: Sill knows it has not read all of it.
    assert (report.incomplete, report.updated, report.unchanged) == (1, 0, 0)
    assert report.outside_refunds == LISTS_MAX["refunds"]
    assert (
        Charge.objects.get(order__site=site).amount_refunded_outside_minor
        == 50 * LISTS_MAX["refunds"]
    )


def test_a_failed_read_of_the_rest_of_an_order_still_ends_the_sync(site, shopify, shopify_account):
    placed = shopify.add_order(total="130.00")
    placed.lines = [(f"SKU-{i}", f"Item {i}", 1, Decimal("1.00")) for i in range(130)]
    shopify.http_500["SillOrderLines"] = 1
    with pytest.raises(RailError, match="HTTP 500"):
        sync_orders(site=site)
    assert not Order.objects.exists()
