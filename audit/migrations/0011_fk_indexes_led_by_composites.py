"""The foreign keys whose column leads a unique or composite index lose their index of the
column alone: auditrecord.site, audittreenode.site (one index write less per row, on
every decision).

Only the indexes are dropped (``sill.indexes``): ``AlterField`` would also drop and re-add each
foreign key constraint, checking the whole table again while its writers wait.
"""

import django.db.models.deletion
from django.db import migrations, models

from sill import indexes

FIELDS = [("auditrecord", "site"), ("audittreenode", "site")]


drop, restore = indexes.dropping("audit", FIELDS)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_seal_slack_webhook"),
        ("audit", "0010_background_verification"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="auditrecord",
                    name="site",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="audit_records",
                        to="accounts.site",
                    ),
                ),
                migrations.AlterField(
                    model_name="audittreenode",
                    name="site",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="audit_tree_nodes",
                        to="accounts.site",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, restore)],
        ),
    ]
