"""Webhook events name the store that sent them (WooCommerce and Shopify).

The events still waiting to be applied are given their site's connected store: the store
processing would have filed them under until now, pinned so that connecting another store
later no longer moves them. Applied ones stay blank (unknown): nothing processes them again,
and a guess would only read as history.
"""

from django.db import migrations, models


def name_waiting_events_senders(apps, schema_editor):
    RailAccount = apps.get_model("rails", "RailAccount")
    WebhookEvent = apps.get_model("rails", "WebhookEvent")
    accounts = RailAccount.objects.filter(rail__in=["woocommerce", "shopify"]).exclude(
        connected_account=""
    )
    for account in accounts:
        WebhookEvent.objects.filter(
            site_id=account.site_id, rail=account.rail, processed_at__isnull=True
        ).update(sender=account.connected_account)


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0007_woolink_store_url"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookevent",
            name="sender",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.RunPython(name_waiting_events_senders, migrations.RunPython.noop),
    ]
