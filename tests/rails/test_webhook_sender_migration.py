"""The migration that names the sender of stored webhook events (rails 0008)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from sill.accounts.models import Site
from sill.rails.models import WebhookEvent

BEFORE = [("rails", "0007_woolink_store_url")]
AFTER = [("rails", "0008_webhookevent_sender")]
SITE = "01TESTSITE00000000000SEND1"
BARE = "01TESTSITE00000000000SEND2"  # no store connected


@pytest.mark.django_db(transaction=True)
def test_events_still_waiting_are_named_after_their_sites_store_and_applied_ones_stay_blank():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    account = apps.get_model("rails", "RailAccount")
    event = apps.get_model("rails", "WebhookEvent")
    for pk in (SITE, BARE):
        Site.objects.create(id=pk, name="S", merchant_domain=f"{pk.lower()}.example")
    account.objects.create(site_id=SITE, rail="woocommerce", connected_account="https://a.example")
    account.objects.create(site_id=SITE, rail="shopify", connected_account="a.myshopify.com")
    account.objects.create(site_id=SITE, rail="stripe", connected_account="acct_1")

    def stored(site: str, rail: str, event_id: str, *, applied: bool = False) -> None:
        event.objects.create(
            site_id=site, rail=rail, event_id=event_id, type="t", payload="{}",
            processed_at=timezone.now() if applied else None,
        )  # fmt: skip

    stored(SITE, "woocommerce", "woo-waiting")
    stored(SITE, "woocommerce", "woo-applied", applied=True)
    stored(SITE, "shopify", "shop-waiting")
    stored(SITE, "stripe", "evt_waiting")
    stored(BARE, "woocommerce", "woo-no-store")
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    senders = dict(WebhookEvent.objects.values_list("event_id", "sender"))
    assert senders == {
        "woo-waiting": "https://a.example",
        "woo-applied": "",  # unknown: nothing processes it again
        "shop-waiting": "a.myshopify.com",
        "evt_waiting": "",
        "woo-no-store": "",
    }
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
