"""The migration that keeps Shopify's and WooCommerce's webhook bodies once (rails 0009)."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sill.accounts.models import Site
from sill.rails.models import WebhookEvent

BEFORE = [("rails", "0008_webhookevent_sender")]
AFTER = [("rails", "0009_webhookevent_body_sha256")]
SITE = "01TESTSITE00000000000BODY1"
OTHER = "01TESTSITE00000000000BODY2"


@pytest.mark.django_db(transaction=True)
def test_stored_bodies_get_their_digest_once_per_site_and_rail():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    event = apps.get_model("rails", "WebhookEvent")
    for pk in (SITE, OTHER):
        Site.objects.create(id=pk, name="S", merchant_domain=f"{pk.lower()}.example")
    body = '{"id": 1, "updated_at": "2026-12-01T10:00:00Z", "note": "é"}'

    def stored(site: str, rail: str, event_id: str, payload: str = body) -> None:
        event.objects.create(site_id=site, rail=rail, event_id=event_id, type="t", payload=payload)

    stored(SITE, "shopify", "wh-1")
    stored(SITE, "shopify", "wh-replayed")  # the same body again, under another id
    stored(SITE, "woocommerce", "delivery-1")  # another rail: its own
    stored(OTHER, "shopify", "wh-1")  # another site: its own
    stored(SITE, "shopify", "wh-2", payload="{}")
    stored(SITE, "stripe", "evt_1")  # its id is signed: no digest
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    kept = {(e.site_id, e.rail, e.event_id): e.body_sha256 for e in WebhookEvent.objects.all()}
    assert kept == {
        (SITE, "shopify", "wh-1"): digest,
        (SITE, "shopify", "wh-replayed"): "",
        (SITE, "woocommerce", "delivery-1"): digest,
        (OTHER, "shopify", "wh-1"): digest,
        (SITE, "shopify", "wh-2"): hashlib.sha256(b"{}").hexdigest(),
        (SITE, "stripe", "evt_1"): "",
    }
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
