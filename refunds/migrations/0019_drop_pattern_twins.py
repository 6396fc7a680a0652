"""Drop the ``varchar_pattern_ops`` twins of the refund's id, order and charge indexes
(PostgreSQL only): three index entries fewer on every decision, none of them ever read
(``sill.indexes.dropping_pattern_twins``)."""

from django.db import migrations

from sill import indexes

drop, restore = indexes.dropping_pattern_twins(
    "refunds", [("refund", "id"), ("refund", "order"), ("refund", "charge")]
)


class Migration(migrations.Migration):
    dependencies = [("refunds", "0018_fk_indexes_led_by_composites")]

    operations = [migrations.RunPython(drop, restore, elidable=False)]
