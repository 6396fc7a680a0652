"""Database defaults for the NOT NULL columns earlier migrations added without one, the same
values as the models' defaults: a process older than a column (during an upgrade, or after
the code alone is rolled back) inserts rows that do not name it, and those inserts failed.
Only the columns' DEFAULT changes; no row is rewritten. tests/test_migration_defaults.py."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0011_woo_charges_as_stripe_charged"),
    ]

    operations = [
        migrations.AlterField(
            model_name="charge",
            name="amount_refunded_outside_minor",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="charge",
            name="attempts",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="charge",
            name="attention_reason",
            field=models.CharField(blank=True, db_default="", default="", max_length=300),
        ),
        migrations.AlterField(
            model_name="charge",
            name="lease_token",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="charge",
            name="payment_account",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="charge",
            name="payment_method",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="charge",
            name="provider_account",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="charge",
            name="rail_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=40),
        ),
        migrations.AlterField(
            model_name="dispute",
            name="rail_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=40),
        ),
    ]
