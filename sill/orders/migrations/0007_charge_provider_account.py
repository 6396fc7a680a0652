"""Charges name the rail account they were taken on; Shopify charges, the shop they came from.

Each Shopify charge Sill holds is given its site's connected shop. A site has one shop at a
time, and the order sync and webhooks only ever read the shop connected then, so for a site
that never switched shops this is where each of its orders came from; it is also the shop
every refund of them has been sent to so far, so nothing changes for them.

A site that already switched shops holds its earlier shop's orders among them, and Sill's
records cannot tell those apart: an order's shop was never kept (the rail-change records name
each shop connected, but a sync or webhook running across a switch filed orders after it).
Asking Shopify is not a migration's to do, so they get the shop connected now, as they had
in effect until now: refunds of them are sent there, which answers that it has no such order
(Shopify's order ids are global), and nothing moves.

Charges of other rails, and the Shopify charges of a site whose account names no shop, stay
blank: not recorded, read as the account connected now (as before).
"""

from django.db import migrations, models


def name_shopify_charges_shops(apps, schema_editor):
    RailAccount = apps.get_model("rails", "RailAccount")
    Charge = apps.get_model("orders", "Charge")
    for account in RailAccount.objects.filter(rail="shopify").exclude(connected_account=""):
        Charge.objects.filter(order__site_id=account.site_id, rail="shopify").update(
            provider_account=account.connected_account
        )


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0006_drop_pattern_twins"),
        ("rails", "0008_webhookevent_sender"),
    ]

    operations = [
        migrations.AddField(
            model_name="charge",
            name="provider_account",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.RunPython(name_shopify_charges_shops, migrations.RunPython.noop),
    ]
