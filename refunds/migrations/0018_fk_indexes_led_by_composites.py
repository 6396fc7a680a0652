"""The foreign keys whose column leads a unique or composite index lose their index of the
column alone: mandate.agent, mandate.site, refund.agent, refund.site (one index write less
per row, on every decision).

Only the indexes are dropped (``sill.indexes``): ``AlterField`` would also drop and re-add each
foreign key constraint, checking the whole table again while its writers wait.
"""

import django.db.models.deletion
from django.db import migrations, models

from sill import indexes

FIELDS = [("mandate", "agent"), ("mandate", "site"), ("refund", "agent"), ("refund", "site")]


drop, restore = indexes.dropping("refunds", FIELDS)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_seal_slack_webhook"),
        ("refunds", "0017_agent_refund_totals"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="mandate",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="mandates",
                        to="accounts.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="mandate",
                    name="site",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="mandates",
                        to="accounts.site",
                    ),
                ),
                migrations.AlterField(
                    model_name="refund",
                    name="agent",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="refunds",
                        to="accounts.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="refund",
                    name="site",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="refunds",
                        to="accounts.site",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, restore)],
        ),
    ]
