"""WooCommerce charges in a three-decimal currency hold what Stripe charged, not the store's
total (as the order sync records them since it follows the gateway's ``stripe_charged``).

The WooCommerce Stripe gateway charges BHD, JOD, KWD, OMR and TND with the last digit taken
down to Stripe's step of 10 minor units: a KWD 10.125 order is a KWD 10.120 charge. Orders
synced before then kept the store's total as their charge, so 5 fils were refundable in Sill
that Stripe never took, and a full or 100 % refund went to Stripe off its step and was refused
with nothing sent. The order's own total (what the store wrote) stays as it is.

A charge is corrected only where what Sill counts on it (refunded by Sill, outside Sill, and
reserved for a refund in flight) fits within the corrected amount, which is the case for every
charge Stripe's own refunds were recorded on; any other is left for reconciliation to show.
An order left partially refunded only by those fils becomes refunded, as settlement would have
made it. Charges of other rails and currencies, and Stripe charges of Sill's own purchases (no
store link), stay as they are. The signed ``charge`` record of
the old sync keeps the amount it wrote: a migration signs nothing, so this docstring and the
charge's refunds (each signed, summing to the corrected amount) are the trail. Stripe's steps are written out here, as they stood: a migration
does not follow later code.
"""

from django.db import migrations
from django.db.models import F
from django.utils import timezone

STRIPE_STEPS = {"BHD": 10, "JOD": 10, "KWD": 10, "OMR": 10, "TND": 10}


def charge_woo_orders_as_stripe_charged(apps, schema_editor):
    Charge = apps.get_model("orders", "Charge")
    WooOrderLink = apps.get_model("rails", "WooOrderLink")
    woo_orders = WooOrderLink.objects.values("order_id")
    for currency, step in STRIPE_STEPS.items():
        off_step = (
            Charge.objects.filter(
                rail="stripe", currency=currency, status="succeeded", order_id__in=woo_orders
            )
            .annotate(
                counted=F("amount_refunded_minor")
                + F("amount_refunded_outside_minor")
                + F("amount_reserved_minor")
            )
            .select_related("order")
        )
        for charge in off_step:
            charged = charge.amount_minor - charge.amount_minor % step
            if charged == charge.amount_minor or charge.counted > charged:
                continue
            Charge.objects.filter(pk=charge.pk).update(amount_minor=charged)
            order = charge.order
            refunded = charge.amount_refunded_minor + charge.amount_refunded_outside_minor
            if order.status == "PARTIALLY_REFUNDED" and refunded >= charged:
                type(order).objects.filter(pk=order.pk).update(
                    status="REFUNDED", updated_at=timezone.now()
                )


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0010_charge_payment_account"),
        ("rails", "0011_learn_payment_accounts_schedule"),
    ]

    operations = [
        migrations.RunPython(charge_woo_orders_as_stripe_charged, migrations.RunPython.noop),
    ]
