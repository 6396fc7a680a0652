"""WooCommerce orders come into Sill as Stripe charges: the sync command and its paging."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from sill.accounts import two_factor
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
        # A negative line (a line item's price check), lines summing past a bigint (the
        # order's total as first written): each ended the whole sync with a traceback.
        [{"name": "Refund line", "sku": "R", "quantity": 1, "total": "-5.00"}],
        [{"name": "Gold", "sku": "G", "quantity": 1, "total": "9999999999999999.99"}] * 10,
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


@pytest.mark.parametrize(
    "unreadable",
    [
        {"total": "lots"},
        {"currency": None},
        {"date_created_gmt": "yesterday"},
        {"id": "x"},
        # 2**53 cents: more than its signed charge record holds (that write ended the sync).
        {"total": "90071992547409.92"},
    ],
)
def test_an_unreadable_order_is_counted_and_the_sync_reads_on(
    site, woo, woo_account, unreadable, capsys
):
    """One order Sill cannot read ended the whole sync with an error: every order after it,
    on every later run, never came in."""
    woo.add_order(total="10.00", stripe_charge="ch_before")
    woo.add_order(total="10.00", stripe_charge="ch_bad", overrides=unreadable)
    woo.add_order(total="20.00", stripe_charge="ch_after")
    report = sync_orders(site=site)
    assert (report.created, report.unreadable) == (2, 1)
    assert set(
        Charge.objects.filter(order__site=site).values_list("provider_charge_id", flat=True)
    ) == {
        "ch_before",
        "ch_after",
    }
    call_command("rails", "sync-woocommerce", "--site", site.pk, "--full")
    assert "1 unreadable" in capsys.readouterr().out


@pytest.mark.parametrize("number", ["1001", "W" * 40])
def test_an_order_whose_number_and_fallback_are_taken_still_comes_in(
    site, woo, woo_account, make_order, number
):
    """A number the site already uses got ``-woo<id>`` appended, cut to 40 characters: a
    40-character number was cut back to itself, and a third store's order 1001 (after the
    site's own #1001 and a second store's 1001-woo1001) met the fallback taken too. Both
    ended the sync with a database error, and no later order came in."""
    placed = woo.add_order(total="10.00", stripe_charge="ch_taken", overrides={"number": number})
    woo.add_order(total="20.00", stripe_charge="ch_next")
    fallback = f"{number}-woo{placed.id}"[:40]
    for taken in {number, fallback}:
        Order.objects.filter(pk=make_order().pk).update(number=taken)
    report = sync_orders(site=site)
    assert report.created == 2
    link = WooOrderLink.objects.select_related("order").get(site=site, woo_order_id=placed.id)
    assert len(link.order.number) <= 40 and link.order.number not in {number, fallback}
    assert str(placed.id) in link.order.number


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


def _orders_over_time(woo, count: int, *, start=None, prefix: str = "ch_t") -> list:
    """``count`` paid orders, each modified a second after the one before."""
    from datetime import UTC, datetime, timedelta

    start = start or datetime(2026, 11, 1, tzinfo=UTC)
    return [
        woo.add_order(
            total="10.00",
            stripe_charge=f"{prefix}{n}",
            modified_at=start + timedelta(seconds=n),
        )
        for n in range(count)
    ]


def test_a_store_larger_than_one_sync_is_read_whole_by_running_it_again(
    site, woo, woo_account, monkeypatch
):
    """The order list is read oldest-modified first and one sync reads at most 200 pages.
    Each run read from the start again, so a store past 20,000 orders stopped at the same
    oldest 20,000 every time and its newest orders never came in. Each run now goes on from
    where the last one's complete pages ended."""
    from sill.rails.base import RailError
    from sill.rails.woocommerce import client

    monkeypatch.setattr(client, "MAX_PAGES", 2)  # 20,000 orders, as 200 orders here
    _orders_over_time(woo, 450)
    # Each request reads from the newest order's second on: that order again (unchanged),
    # so two requests of 100 bring 199.
    with pytest.raises(RailError, match="run the sync again"):
        sync_orders(site=site)
    assert Order.objects.filter(site=site).count() == 199
    with pytest.raises(RailError, match="run the sync again"):
        sync_orders(site=site)
    assert Order.objects.filter(site=site).count() == 397
    report = sync_orders(site=site)
    assert report.created == 53 and Order.objects.filter(site=site).count() == 450
    assert WooOrderLink.objects.filter(site=site).count() == 450


def test_a_later_sync_reads_only_what_changed_since_and_full_reads_everything(
    site, woo, woo_account, capsys
):
    from datetime import UTC, datetime, timedelta

    placed = _orders_over_time(woo, 30)
    assert sync_orders(site=site).created == 30
    woo.order_queries.clear()
    # Nothing changed: the list asked for is what changed after the last order read (a
    # second's overlap: WooCommerce times orders to the second), in GMT.
    again = sync_orders(site=site)
    (query,) = woo.order_queries
    assert query["modified_after"][0] == "2026-11-01T00:00:28"
    assert query["dates_are_gmt"][0] == "true" and query["orderby"][0] == "modified"
    assert (again.created, again.unchanged) == (0, 1)
    # An order changed in the store since, and a new one: both come in, nothing else is read.
    placed[3].email = "changed@example.com"
    placed[3].modified_at = datetime(2026, 11, 2, tzinfo=UTC)
    start = datetime(2026, 11, 2, tzinfo=UTC) + timedelta(hours=1)
    _orders_over_time(woo, 1, start=start, prefix="ch_new")
    later = sync_orders(site=site)
    assert (later.created, later.updated, later.unchanged) == (1, 1, 1)
    assert WooOrderLink.objects.get(woo_order_id=placed[3].id).order.buyer_email == (
        "changed@example.com"
    )
    # --full reads the whole store again.
    woo.order_queries.clear()
    call_command("rails", "sync-woocommerce", "--site", site.pk, "--full")
    assert "31 unchanged" in capsys.readouterr().out
    assert "modified_after" not in woo.order_queries[0]


def test_connecting_another_store_reads_it_from_the_start(site, woo, woo_account, members):
    """Where the last sync ended is the old store's: the new one is read whole."""
    from sill.rails.models import RailAccount
    from sill.rails.woocommerce.connect import configure_woocommerce
    from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, StubServer

    _orders_over_time(woo, 3)
    sync_orders(site=site)
    assert RailAccount.objects.get(pk=woo_account.pk).orders_synced_through is not None
    owner = members["owner"].user
    # Saved again for the same store (a new webhook secret): the position stays.
    configure_woocommerce(
        site=site,
        actor=owner,
        store_url=woo.url,
        consumer_key="",
        consumer_secret="",
        webhook_secret="another-webhook-secret",
        second_factor=two_factor.OPERATOR,
    )
    assert RailAccount.objects.get(pk=woo_account.pk).orders_synced_through is not None
    with StubServer() as other:
        configure_woocommerce(
            site=site,
            actor=owner,
            store_url=other.url,
            consumer_key=CONSUMER_KEY,
            consumer_secret=CONSUMER_SECRET,
            webhook_secret="store-b-webhook-secret",
            second_factor=two_factor.OPERATOR,
        )
        assert RailAccount.objects.get(pk=woo_account.pk).orders_synced_through is None
        _orders_over_time(other, 2, prefix="ch_other")
        report = sync_orders(site=site)
        assert report.created + report.updated + report.unchanged == 2
        assert "modified_after" not in other.order_queries[0]


def test_orders_of_another_store_with_the_same_ids_are_other_orders(site, woo, woo_account):
    """Woo order ids are per store: after the site was connected to another store, its
    order 1001 updated the first store's order 1001 (buyer, status) instead of coming in."""
    from sill.rails.models import RailAccount
    from tests.rails.woo_stub import StubServer

    first = woo.add_order(total="10.00", stripe_charge="ch_store_a", email="a@example.com")
    sync_orders(site=site)
    with StubServer() as other:
        second = other.add_order(total="20.00", stripe_charge="ch_store_b", email="b@example.com")
        assert second.id == first.id
        RailAccount.objects.filter(pk=woo_account.pk).update(
            connected_account=other.url, orders_synced_through=None
        )
        report = sync_orders(site=site)
    assert report.created == 1
    emails = sorted(Order.objects.filter(site=site).values_list("buyer_email", flat=True))
    assert emails == ["a@example.com", "b@example.com"]
    assert WooOrderLink.objects.filter(site=site, woo_order_id=first.id).count() == 2


def test_a_sync_of_the_old_store_still_running_when_another_is_connected_keeps_its_position(
    site, woo, woo_account, monkeypatch
):
    """A sync reads for minutes. Connecting another store meanwhile starts that store from the
    start (no position), but the old store's sync went on saving where it was after each
    page, onto the account now naming the new store: the new store's first sync then asked
    only for orders changed after the old store's newest, and its older orders never came in.
    """
    from datetime import UTC, datetime

    from sill.rails.models import RailAccount
    from sill.rails.woocommerce import sync
    from tests.rails.woo_stub import StubServer

    _orders_over_time(woo, 3)
    with StubServer() as other:
        _orders_over_time(other, 2, start=datetime(2026, 10, 1, tzinfo=UTC), prefix="ch_other")
        upsert = sync.upsert_order

        def connected_meanwhile(**kwargs):
            # What configure_woocommerce saves for another store, while this sync runs.
            RailAccount.objects.filter(pk=woo_account.pk).update(
                connected_account=other.url, orders_synced_through=None
            )
            return upsert(**kwargs)

        monkeypatch.setattr(sync, "upsert_order", connected_meanwhile)
        sync_orders(site=site)
        monkeypatch.setattr(sync, "upsert_order", upsert)
        assert RailAccount.objects.get(pk=woo_account.pk).orders_synced_through is None
        report = sync_orders(site=site)
    assert report.created == 2
    assert WooOrderLink.objects.filter(site=site, store_url=other.url).count() == 2


def test_an_order_changed_while_the_list_is_read_skips_no_other(site, woo, woo_account):
    """The list is sorted by modification time: an order already read that the store
    changes meanwhile moves to the end. Read by page number, every later order moved up one
    place and the one at the next page's start was never read, and, the next sync reading
    on from the newest order read, never read at all. Each request now asks for what was
    modified since the newest order read so far."""
    from datetime import UTC, datetime

    placed = _orders_over_time(woo, 250)

    def change_one(pages_served: int) -> None:
        if pages_served == 1:  # after the first page: its 6th order is changed
            placed[5].email = "changed@example.com"
            placed[5].modified_at = datetime.now(UTC)

    woo.after_order_page = change_one
    report = sync_orders(site=site)
    assert WooOrderLink.objects.filter(site=site).count() == 250
    assert report.created == 250
    assert WooOrderLink.objects.get(woo_order_id=placed[5].id).order.buyer_email == (
        "changed@example.com"
    )
