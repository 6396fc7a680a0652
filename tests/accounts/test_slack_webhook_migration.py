"""The migration that seals existing Slack webhook URLs (accounts 0011), forward and back."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from refunds.review.slack import webhook_url

BEFORE = [("accounts", "0010_site_refund_window")]
AFTER = [("accounts", "0011_seal_slack_webhook")]
HOOK = "https://hooks.slack.com/services/T000/B000/plainsecret"


@pytest.mark.django_db(transaction=True)
def test_existing_webhook_urls_are_sealed_and_can_be_unsealed():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("accounts", "Site")
    old.objects.create(
        id="01TESTSITE00000000000MIGR1", name="M", merchant_domain="m.example",
        slack_webhook_url=HOOK,
    )  # fmt: skip
    old.objects.create(id="01TESTSITE00000000000MIGR2", name="N", merchant_domain="n.example")
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    # The model as of 0011: later migrations add columns the table has not got yet.
    sealed = executor.loader.project_state(AFTER).apps.get_model("accounts", "Site")
    site = sealed.objects.get(pk="01TESTSITE00000000000MIGR1")
    assert HOOK.encode() not in bytes(site.slack_webhook_sealed)
    assert webhook_url(site) == HOOK
    assert bytes(sealed.objects.get(pk="01TESTSITE00000000000MIGR2").slack_webhook_sealed) == b""
    with connection.cursor() as cursor:
        columns = [
            c.name for c in connection.introspection.get_table_description(cursor, "accounts_site")
        ]
    assert "slack_webhook_url" not in columns
    # And back: the reverse opens the blob into the plain column again.
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("accounts", "Site")
    assert old.objects.get(pk="01TESTSITE00000000000MIGR1").slack_webhook_url == HOOK
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
