"""Database defaults for the NOT NULL columns earlier migrations added without one, the same
values as the models' defaults: a process older than a column (during an upgrade, or after
the code alone is rolled back) inserts rows that do not name it, and those inserts failed.
Only the columns' DEFAULT changes; no row is rewritten. tests/test_migration_defaults.py."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0026_refund_decided_via"),
    ]

    operations = [
        migrations.AlterField(
            model_name="reconciliationrun",
            name="customers_checked",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="reconciliationrun",
            name="customers_unreadable",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="refund",
            name="decision_hash",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AlterField(
            model_name="refund",
            name="failed_at_rail_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="refund",
            name="failed_at_rail_message",
            field=models.CharField(blank=True, db_default="", default="", max_length=500),
        ),
        migrations.AlterField(
            model_name="refund",
            name="failed_at_rail_source",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="refund",
            name="kind",
            field=models.CharField(
                choices=[("refund", "Refund"), ("customer_credit", "Customer credit")],
                db_default="refund",
                default="refund",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="refund",
            name="lease_token",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="refund",
            name="reason_label",
            field=models.CharField(blank=True, db_default="", default="", max_length=120),
        ),
        migrations.AlterField(
            model_name="refund",
            name="reason_path",
            field=models.CharField(blank=True, db_default="", default="", max_length=500),
        ),
        migrations.AlterField(
            model_name="refund",
            name="review_note",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
    ]
