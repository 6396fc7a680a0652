"""Shopify's and WooCommerce's webhook events are kept once per body too (its sha256).

Their signature covers the body alone, not the delivery id, so the events stored already are
given their body's digest: a body Sill took before this migration is a duplicate afterwards
too, however old. Where a body is already stored twice (replayed, or a WooCommerce body without
``date_modified_gmt`` delivered twice), the first event keeps the digest and the later ones
stay blank, which the unique constraint allows.
"""

import hashlib

from django.db import migrations, models
from django.db.models import Q

BODY_SIGNED_RAILS = ("shopify", "woocommerce")


def digest_stored_bodies(apps, schema_editor):
    WebhookEvent = apps.get_model("rails", "WebhookEvent")
    events = (
        WebhookEvent.objects.filter(rail__in=BODY_SIGNED_RAILS)
        .order_by("pk")
        .values_list("pk", "site_id", "rail", "payload")
    )
    seen = set()
    for pk, site_id, rail, payload in events.iterator(chunk_size=500):
        # The payload is the received bytes decoded as UTF-8: encoding it gives them back.
        digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()
        if (site_id, rail, digest) in seen:
            continue
        seen.add((site_id, rail, digest))
        WebhookEvent.objects.filter(pk=pk).update(body_sha256=digest)


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0008_webhookevent_sender"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookevent",
            name="body_sha256",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.RunPython(digest_stored_bodies, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="webhookevent",
            constraint=models.UniqueConstraint(
                condition=~Q(body_sha256=""),
                fields=("site", "rail", "body_sha256"),
                name="webhookevent_body_once_per_site_rail",
            ),
        ),
    ]
