"""Database defaults for the NOT NULL columns earlier migrations added without one, the same
values as the models' defaults: a process older than a column (during an upgrade, or after
the code alone is rolled back) inserts rows that do not name it, and those inserts failed.
Only the columns' DEFAULT changes; no row is rewritten. tests/test_migration_defaults.py."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0011_learn_payment_accounts_schedule"),
    ]

    operations = [
        migrations.AlterField(
            model_name="railaccount",
            name="payment_account",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="railaccount",
            name="webhook_secrets_encrypted",
            field=models.BinaryField(blank=True, db_default=b"", default=b""),
        ),
        migrations.AlterField(
            model_name="webhookevent",
            name="attempts",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="webhookevent",
            name="body_sha256",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AlterField(
            model_name="webhookevent",
            name="last_error",
            field=models.CharField(blank=True, db_default="", default="", max_length=500),
        ),
        migrations.AlterField(
            model_name="webhookevent",
            name="sender",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="wooorderlink",
            name="store_url",
            field=models.CharField(db_default="", default="", max_length=255),
        ),
    ]
