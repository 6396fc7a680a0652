"""Drop the ``varchar_pattern_ops`` twin of the chain head's primary key (PostgreSQL only):
every audit append updates that row (``sill.indexes.dropping_pattern_twins``)."""

from django.db import migrations

from sill import indexes

drop, restore = indexes.dropping_pattern_twins("audit", [("auditchainhead", "site")])


class Migration(migrations.Migration):
    dependencies = [("audit", "0011_fk_indexes_led_by_composites")]

    operations = [migrations.RunPython(drop, restore, elidable=False)]
