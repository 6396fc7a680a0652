"""WooCommerce orders come into Sill as Stripe charges: the sync command and its paging."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from sill.orders.models import Charge, Order
from sill.rails.woocommerce.models import WooOrderLink
from sill.rails.woocommerce.sync import sync_orders

pytestmark = pytest.mark.django_db


def test_it_brings_paid_orders_in_as_stripe_charges_linked_to_the_woo_order(site, woo, woo_account):
    placed = woo.add_order(total="89.00", stripe_intent="pi_woo1", stripe_charge="ch_woo1")
    report = sync_orders(site=site)
    assert (report.created, report.skipped) == (1, 0)
    link = WooOrderLink.objects.get(site=site, woo_order_id=placed.id)
    order = link.order
    assert (order.total_minor, order.currency, order.status) == (8900, "USD", "PAID")
    assert order.buyer_email == "buyer@example.com"
    assert [(i.sku, i.quantity, i.unit_price_minor) for i in order.items.all()] == [
        ("BEAN-1", 2, 4450)
    ]
    charge = Charge.objects.get(order=order)
    assert (charge.rail, charge.provider_payment_id, charge.provider_charge_id) == (
        "stripe",
        "pi_woo1",
        "ch_woo1",
    )
    # Every request was signed (OAuth 1.0a over the loopback's plain http).
    assert set(woo.auth_seen) == {"oauth1"}


def test_it_reads_every_page_and_changes_nothing_the_second_time(site, woo, woo_account):
    for n in range(205):
        woo.add_order(total="10.00", stripe_charge=f"ch_page{n}")
    woo.add_order(total="5.00", paid=False, status="pending")
    report = sync_orders(site=site)
    assert (report.created, report.skipped) == (205, 1)
    again = sync_orders(site=site)
    assert (again.created, again.unchanged, again.skipped) == (0, 205, 1)
    assert Order.objects.filter(site=site).count() == 205


def test_the_command_syncs_a_site_and_names_bad_input(site, woo, woo_account, capsys, other_site):
    woo.add_order(stripe_charge="ch_cmd")
    call_command("rails", "sync-woocommerce", "--site", site.pk)
    assert "1 created" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no site"):
        call_command("rails", "sync-woocommerce", "--site", "nope")
    with pytest.raises(CommandError, match="No WooCommerce store"):
        call_command("rails", "sync-woocommerce", "--site", other_site.pk)


def test_wrong_keys_are_named_not_a_trace(site, woo, woo_account):
    import json

    woo_account.set_secret(
        json.dumps({"consumer_key": "ck_" + "1" * 40, "consumer_secret": "cs_" + "2" * 40})
    )
    woo_account.save()
    with pytest.raises(CommandError, match="woocommerce_rest_cannot_view"):
        call_command("rails", "sync-woocommerce", "--site", site.pk)


@pytest.mark.parametrize(
    "items",
    [
        [{"name": "Beans", "sku": "B", "quantity": "two", "total": "10.00"}],
        [{"name": "Beans", "sku": "B", "quantity": 10**12, "total": "0.00"}],
        [{"name": "Beans", "sku": "B", "quantity": 1, "total": "99999999999999999.00"}],
    ],
)
def test_an_order_with_odd_lines_neither_stops_the_sync_nor_writes_half_an_order(
    site, woo, woo_account, items
):
    woo.add_order(total="10.00", stripe_charge="ch_odd", overrides={"line_items": items})
    woo.add_order(total="20.00", stripe_charge="ch_good")
    report = sync_orders(site=site)
    assert report.created == 2
    assert Charge.objects.filter(order__site=site).count() == 2
    for order in Order.objects.filter(site=site):
        assert order.items.exists()
        assert all(0 < i.quantity < 2**31 for i in order.items.all())


def test_a_store_with_more_pages_than_the_bound_is_told_not_silently_cut(
    site, woo, woo_account, monkeypatch
):
    from sill.rails.base import RailError
    from sill.rails.woocommerce import client

    monkeypatch.setattr(client, "MAX_PAGES", 2)  # 20,000 orders, as 200 orders here
    for n in range(205):
        woo.add_order(total="10.00", stripe_charge=f"ch_bound{n}")
    with pytest.raises(RailError, match="pages"):
        sync_orders(site=site)
    # What was read before the bound is in, whole.
    assert Order.objects.filter(site=site).count() == 200
