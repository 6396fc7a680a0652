"""The migration that names the store of each WooCommerce order's charge (orders 0009)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sill.accounts.models import Site
from sill.orders.models import Charge

BEFORE = [("orders", "0008_charge_attention_notified_at"), ("rails", "0008_webhookevent_sender")]
AFTER = [("orders", "0009_woo_charges_name_their_store")]
SITE = "01TESTSITE000000000000WOO1"
A = "https://a.example"
B = "https://b.example"


@pytest.mark.django_db(transaction=True)
def test_woo_charges_are_given_their_links_store_and_others_stay_as_they_were():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    account = apps.get_model("rails", "RailAccount")
    link = apps.get_model("rails", "WooOrderLink")
    order = apps.get_model("orders", "Order")
    charge = apps.get_model("orders", "Charge")
    Site.objects.create(id=SITE, name="S", merchant_domain="woo-migration.example")
    # Connected to store B now; store A's order 1001 came in before the switch.
    account.objects.create(site_id=SITE, rail="woocommerce", connected_account=B)
    account.objects.create(site_id=SITE, rail="stripe", connected_account="acct_1")

    def charged(
        charge_id: str, *, rail: str = "stripe", store: str = "", named: str = "", woo_id=1001
    ):
        placed = order.objects.create(
            id=f"ord_{charge_id}", site_id=SITE, number=charge_id, currency="USD", total_minor=100
        )
        charge.objects.create(
            id=charge_id, order=placed, rail=rail, provider_charge_id=charge_id,
            provider_account=named, amount_minor=100, currency="USD", status="succeeded",
        )  # fmt: skip
        if store:
            link.objects.create(site_id=SITE, order=placed, store_url=store, woo_order_id=woo_id)

    charged("ch_a", store=A)  # A's order: A, never the store connected now
    charged("ch_b", store=B)
    charged("ch_named", store=A, named=B, woo_id=1002)  # already names a store: left as it is
    charged("ch_purchase")  # a Stripe charge of Sill's own purchase: no store
    charged("ch_shop", rail="shopify", named="s.myshopify.com")
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    stores = dict(Charge.objects.values_list("id", "provider_account"))
    assert stores == {
        "ch_a": A,
        "ch_b": B,
        "ch_named": B,
        "ch_purchase": "",
        "ch_shop": "s.myshopify.com",
    }
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
