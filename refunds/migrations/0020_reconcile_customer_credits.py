"""Reconciliation compares customer credits too: an item names either a charge (and its order)
or the customer whose balance a credit is on; a run counts the customers it checked and where
it stopped.

Dropping NOT NULL and adding the CHECK (every existing item names a charge, so it holds) take
a brief lock of a small table; the new columns are empty.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_seal_slack_webhook"),
        ("orders", "0006_drop_pattern_twins"),
        ("refunds", "0019_drop_pattern_twins"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="reconciliationitem",
            name="customer",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="orders.customer",
            ),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="customer_cursor",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="customers_checked",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="customers_unreadable",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name="reconciliationitem",
            name="charge",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="orders.charge",
            ),
        ),
        migrations.AlterField(
            model_name="reconciliationitem",
            name="order",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="orders.order",
            ),
        ),
        migrations.AddIndex(
            model_name="reconciliationitem",
            index=models.Index(
                fields=["customer", "resolved_at"], name="refunds_rec_custome_633692_idx"
            ),
        ),
        migrations.AddConstraint(
            model_name="reconciliationitem",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("charge__isnull", False),
                        ("customer__isnull", True),
                        ("order__isnull", False),
                    ),
                    models.Q(
                        ("charge__isnull", True),
                        ("customer__isnull", False),
                        ("order__isnull", True),
                    ),
                    _connector="OR",
                ),
                name="reconitem_charge_or_customer",
            ),
        ),
    ]
