"""WooCommerce orders' charges name their store (``Charge.provider_account``), as Shopify's
charges name their shop (0007).

A Woo order is paid on Stripe, so its charge is on rail ``stripe`` and its order's store was
kept only on its link (``WooOrderLink.store_url``): after a site was connected to another
store, a refund of the first store's order was refunded at Stripe as if nothing had changed,
and its record on the Woo order then gave up (the store connected now holds another order
under the same id). The charge now names the store, so that every path that reads the charge
(quote, execution, facts, reconciliation) refuses it while its store is not connected.

Each blank charge of a linked order is given its link's store: the store the order sync or a
webhook filed it under. For links made since they named their store (rails 0007) that is the
store the order came from. Links made before were given their site's store connected then
(rails 0007): for a site that never switched stores, where they came from, and where their
refunds have been recorded so far; a site that had already switched holds its earlier store's
orders among them, which Sill's records cannot tell apart (as 0007 says of Shopify's), so
they are read as that store's orders, as their links already read them. That is better than
the site's store connected now, which would name a store the order never came from whenever
the site switched after its links named their store.

Charges of other rails, Stripe charges of orders with no link (Sill's own purchases), and
charges that already name an account stay as they are.
"""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def name_woo_charges_stores(apps, schema_editor):
    Charge = apps.get_model("orders", "Charge")
    WooOrderLink = apps.get_model("rails", "WooOrderLink")
    store = WooOrderLink.objects.filter(order_id=OuterRef("order_id")).values("store_url")[:1]
    Charge.objects.filter(
        rail="stripe",
        provider_account="",
        order_id__in=WooOrderLink.objects.exclude(store_url="").values("order_id"),
    ).update(provider_account=Subquery(store))


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0008_charge_attention_notified_at"),
        ("rails", "0008_webhookevent_sender"),
    ]

    operations = [
        migrations.RunPython(name_woo_charges_stores, migrations.RunPython.noop),
    ]
