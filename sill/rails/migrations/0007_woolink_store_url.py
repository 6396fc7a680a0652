"""WooCommerce order links name their store: Woo order ids are per store."""

from django.db import migrations, models


def fill_store_urls(apps, schema_editor):
    # Every link so far came from the store its site is connected to (a site had one store).
    RailAccount = apps.get_model("rails", "RailAccount")
    WooOrderLink = apps.get_model("rails", "WooOrderLink")
    for account in RailAccount.objects.filter(rail="woocommerce").exclude(connected_account=""):
        WooOrderLink.objects.filter(site_id=account.site_id).update(
            store_url=account.connected_account
        )


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0006_railaccount_orders_synced_through"),
    ]

    operations = [
        migrations.AddField(
            model_name="wooorderlink",
            name="store_url",
            field=models.CharField(default="", max_length=255),
            preserve_default=False,
        ),
        migrations.RunPython(fill_store_urls, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="wooorderlink", name="woolink_unique_per_site"),
        migrations.AddConstraint(
            model_name="wooorderlink",
            constraint=models.UniqueConstraint(
                fields=("site", "store_url", "woo_order_id"), name="woolink_unique_per_store"
            ),
        ),
    ]
