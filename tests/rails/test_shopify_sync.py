"""Shopify order sync: the store's paid orders come into Sill once, with their charge."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from audit.models import AuditRecord
from sill.orders.models import Charge, Customer, ExternalRefund, Order
from sill.rails.shopify.sync import sync_orders

pytestmark = pytest.mark.django_db


def test_it_brings_a_paid_order_in_with_items_buyer_customer_and_charge(
    site, shopify, shopify_account
):
    cid = shopify.add_customer(days_ago=200)
    placed = shopify.add_order(total="89.00", customer_id=cid)
    report = sync_orders(site=site)
    assert (report.created, report.unchanged) == (1, 0)
    order = Order.objects.get(site=site)
    assert order.number == placed.name.lstrip("#") and order.status == "PAID"
    assert (order.total_minor, order.currency, order.buyer_email) == (
        8900,
        "USD",
        "buyer@example.com",
    )
    assert [(i.sku, i.quantity, i.unit_price_minor) for i in order.items.all()] == [
        ("BEAN-1", 2, 4450)
    ]
    customer = Customer.objects.get(site=site)
    assert (
        customer.rail_customer_id == f"gid://shopify/Customer/{cid}" and order.customer == customer
    )
    assert customer.provider_created_at is not None
    charge = Charge.objects.get(order=order)
    assert charge.rail == "shopify" and charge.status == "succeeded"
    assert charge.provider_payment_id == str(placed.id)
    assert charge.provider_charge_id == placed.transactions[0]["id"]
    assert AuditRecord.objects.filter(site=site, kind="charge").count() == 1


def test_it_changes_nothing_the_second_time(site, shopify, shopify_account):
    shopify.add_order(customer_id=shopify.add_customer())
    shopify.add_order(total="12.50")
    assert sync_orders(site=site).created == 2
    again = sync_orders(site=site)
    assert (again.created, again.unchanged) == (0, 2)
    assert Order.objects.filter(site=site).count() == 2 and Charge.objects.count() == 2
    assert AuditRecord.objects.filter(site=site, kind="charge").count() == 2


def test_it_records_refunds_made_in_the_shopify_admin_as_outside_refunds(
    site, shopify, shopify_account
):
    shopify.add_order(total="40.00", refunded="15.00")
    report = sync_orders(site=site)
    assert report.outside_refunds == 1
    charge = Charge.objects.get()
    assert charge.amount_refunded_outside_minor == 1500
    assert ExternalRefund.objects.get().provider_refund_id.startswith("gid://shopify/Refund/")
    assert Order.objects.get().status == "PARTIALLY_REFUNDED"
    assert sync_orders(site=site).outside_refunds == 0  # recorded once
    assert Charge.objects.get().amount_refunded_outside_minor == 1500


def test_it_leaves_unpaid_orders_out(site, shopify, shopify_account):
    shopify.add_order(paid=False)
    assert sync_orders(site=site).skipped == 1
    assert not Order.objects.exists()


def test_without_read_customers_the_order_comes_in_without_its_customer(
    site, shopify, shopify_account
):
    shopify.scopes = ["read_orders", "write_orders"]
    shopify.add_order(customer_id=shopify.add_customer())
    assert sync_orders(site=site).created == 1
    assert Order.objects.get().customer is None and not Customer.objects.exists()


def test_the_command_syncs_a_site_and_names_bad_input(site, shopify, shopify_account, capsys):
    shopify.add_order()
    call_command("rails", "sync-shopify", "--site", site.pk)
    assert "1 created" in capsys.readouterr().out
    call_command("rails", "sync-shopify", "--site", site.pk, "--since", "2026-01-01T00:00:00Z")
    assert "1 unchanged" in capsys.readouterr().out
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="ISO"):
        call_command("rails", "sync-shopify", "--site", site.pk, "--since", "yesterday")
    with pytest.raises(CommandError, match="no site"):
        call_command("rails", "sync-shopify", "--site", "nope")


def test_a_customer_with_a_long_non_ascii_name_is_brought_in_not_a_crash(
    site, shopify, shopify_account
):
    cid = shopify.add_customer()
    shopify.customers[cid]["firstName"] = "Žofie" * 40
    shopify.customers[cid]["lastName"] = "Ünal" * 50
    shopify.add_order(customer_id=cid)
    assert sync_orders(site=site).created == 1
    order = Order.objects.get(site=site)
    assert order.buyer_name.startswith("Žofie") and len(order.buyer_name) <= 200
    assert Customer.objects.get(site=site).name == order.buyer_name


def test_a_page_cursor_that_does_not_move_ends_the_sync_with_an_error_not_a_loop(
    site, shopify, shopify_account
):
    from sill.rails.base import RailError

    shopify.add_order()
    shopify.repeat_cursor = True
    with pytest.raises(RailError, match="cursor"):
        sync_orders(site=site)
    assert sum(1 for op, _ in shopify.calls if op == "SillOrders") == 2
    assert Order.objects.filter(site=site).count() == 1


def test_a_later_capture_of_the_same_order_raises_its_charge(site, shopify, shopify_account):
    placed = shopify.add_order(total="89.00")
    placed.transactions[0].update(kind="CAPTURE", amount=Decimal("50.00"))
    assert sync_orders(site=site).created == 1
    later = dict(placed.transactions[0], id=f"gid://shopify/OrderTransaction/{shopify.new_id()}")
    placed.transactions.append(later | {"amount": Decimal("39.00")})
    assert sync_orders(site=site).updated == 1
    assert Charge.objects.get(order__site=site).amount_minor == 8900
    assert sync_orders(site=site).unchanged == 1
    assert AuditRecord.objects.filter(site=site, kind="charge").count() == 2


_UNREADABLE = {
    "amount": {"totalPriceSet": {"shopMoney": {"amount": "twenty", "currencyCode": "USD"}}},
    "time": {"createdAt": "yesterday"},
    "quantity": {
        "lineItems": {
            "nodes": [{"sku": "X", "name": "X", "quantity": "many", "originalUnitPriceSet": None}],
            "pageInfo": {"hasNextPage": False, "endCursor": None},
        }
    },
    "transactions": {"transactions": "none"},
    "no id": {"id": None},
}


@pytest.mark.parametrize("broken", sorted(_UNREADABLE))
def test_an_unreadable_order_is_named_and_skipped_and_the_orders_after_it_come_in(
    site, shopify, shopify_account, capsys, broken
):
    shopify.add_order(total="10.00")
    bad = shopify.add_order(total="20.00")
    bad.overrides = _UNREADABLE[broken]
    shopify.add_order(total="30.00")
    call_command("rails", "sync-shopify", "--site", site.pk)
    out = capsys.readouterr().out
    assert "2 created" in out and "1 failed" in out
    assert (bad.gid if broken != "no id" else "(without an id) is unreadable") in out
    assert sorted(Order.objects.filter(site=site).values_list("total_minor", flat=True)) == [
        1000,
        3000,
    ]


def test_an_order_sill_cannot_record_is_named_and_the_orders_after_it_come_in(
    site, shopify, shopify_account
):
    # A refund larger than the order's payment: the charge cannot hold it (ExceedsCharge).
    shopify.add_order(total="10.00", refunded="15.00")
    shopify.add_order(total="30.00")
    report = sync_orders(site=site)
    assert (report.created, report.failed) == (1, 1)
    assert "would exceed charge" in report.problems[0]
    assert Order.objects.filter(site=site, total_minor=3000).exists()


def test_an_order_larger_than_a_signed_record_holds_is_named_and_the_orders_after_it_come_in(
    site, shopify, shopify_account
):
    # 2**53 cents: its charge record failed to write (ValueError), which ended the whole sync.
    shopify.add_order(total="10.00")
    shopify.add_order(total="90071992547409.92")
    shopify.add_order(total="30.00")
    report = sync_orders(site=site)
    assert (report.created, report.failed) == (2, 1)
    assert "larger than the $90,071,992,547,409.91 Sill can record" in report.problems[0]
    assert sorted(Order.objects.filter(site=site).values_list("total_minor", flat=True)) == [
        1000,
        3000,
    ]


def test_an_order_whose_payments_sum_past_a_signed_record_is_named_and_skipped(
    site, shopify, shopify_account
):
    # Each capture fits a signed record; their sum, the charge's amount, did not: its charge
    # record failed to write, which ended the whole sync.
    half = "45035996273704.96"  # 2**52 cents
    split = shopify.add_order(total=half)
    split.transactions.append({**split.transactions[0], "id": f"{split.gid}-2"})
    shopify.add_order(total="30.00")
    report = sync_orders(site=site)
    assert (report.created, report.failed) == (1, 1)
    assert split.gid in report.problems[0] and "Sill can record" in report.problems[0]
    assert list(Order.objects.filter(site=site).values_list("total_minor", flat=True)) == [3000]


def test_shopify_unreachable_still_ends_the_sync(site, shopify, shopify_account):
    from django.core.management.base import CommandError

    shopify.add_order()
    shopify.http_500["SillOrders"] = 1
    with pytest.raises(CommandError, match="HTTP 500"):
        call_command("rails", "sync-shopify", "--site", site.pk)
    assert not Order.objects.exists()


def test_two_orders_whose_long_names_begin_alike_both_come_in_under_distinct_numbers(
    site, shopify, shopify_account
):
    prefix = "#" + "WHOLESALE-EUROPE-NORTH-" * 2  # 47 characters: past what a number holds
    first = shopify.add_order(total="10.00")
    first.name = f"{prefix}1001"
    second = shopify.add_order(total="20.00")
    second.name = f"{prefix}1002"
    assert sync_orders(site=site).created == 2
    numbers = dict(
        Order.objects.filter(site=site).values_list("charges__provider_payment_id", "number")
    )
    assert len(set(numbers.values())) == 2 and all(len(n) <= 40 for n in numbers.values())
    for placed in (first, second):
        number = numbers[str(placed.id)]
        assert number.endswith(f"-{placed.id}") and prefix.lstrip("#").startswith(
            number.rsplit("-", 1)[0]
        )
    assert sync_orders(site=site).unchanged == 2
