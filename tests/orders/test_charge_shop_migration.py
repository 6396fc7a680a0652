"""The migration that names the shop of each Shopify charge (orders 0007)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sill.accounts.models import Site
from sill.orders.models import Charge

BEFORE = [("orders", "0006_drop_pattern_twins"), ("rails", "0008_webhookevent_sender")]
AFTER = [("orders", "0007_charge_provider_account")]
SITE = "01TESTSITE00000000000SHOP1"
BARE = "01TESTSITE00000000000SHOP2"  # its Shopify account names no shop


@pytest.mark.django_db(transaction=True)
def test_shopify_charges_are_given_their_sites_connected_shop_and_others_stay_blank():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    account = apps.get_model("rails", "RailAccount")
    order = apps.get_model("orders", "Order")
    charge = apps.get_model("orders", "Charge")
    for pk in (SITE, BARE):
        Site.objects.create(id=pk, name="S", merchant_domain=f"{pk.lower()}.example")
    account.objects.create(site_id=SITE, rail="shopify", connected_account="a.myshopify.com")
    account.objects.create(site_id=SITE, rail="stripe", connected_account="acct_1")
    account.objects.create(site_id=BARE, rail="shopify", connected_account="")

    def charged(site: str, rail: str, charge_id: str) -> None:
        placed = order.objects.create(
            id=f"ord_{charge_id}", site_id=site, number=charge_id, currency="USD", total_minor=100
        )
        charge.objects.create(
            id=charge_id, order=placed, rail=rail, provider_payment_id=charge_id,
            amount_minor=100, currency="USD", status="succeeded",
        )  # fmt: skip

    charged(SITE, "shopify", "ch_shop")
    charged(SITE, "stripe", "ch_stripe")
    charged(BARE, "shopify", "ch_bare")
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    shops = dict(Charge.objects.values_list("id", "provider_account"))
    assert shops == {"ch_shop": "a.myshopify.com", "ch_stripe": "", "ch_bare": ""}
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
