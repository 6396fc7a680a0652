"""Database defaults for the NOT NULL columns earlier migrations added without one, the same
values as the models' defaults: a process older than a column (during an upgrade, or after
the code alone is rolled back) inserts rows that do not name it, and those inserts failed.
Only the columns' DEFAULT changes; no row is rewritten. tests/test_migration_defaults.py."""

from django.db import migrations, models

import sill.accounts.models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0016_slack_token_refused_link_why"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="refund_enabled",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AlterField(
            model_name="membership",
            name="slack_link_why",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AlterField(
            model_name="membership",
            name="slack_team_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="membership",
            name="slack_user_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="site",
            name="require_two_factor",
            field=models.BooleanField(
                db_default=True, default=sill.accounts.models.require_two_factor_default
            ),
        ),
        migrations.AlterField(
            model_name="site",
            name="slack_bot_token_sealed",
            field=models.BinaryField(blank=True, db_default=b"", default=b""),
        ),
        migrations.AlterField(
            model_name="site",
            name="slack_signing_secret",
            field=models.BinaryField(blank=True, db_default=b"", default=b""),
        ),
        migrations.AlterField(
            model_name="site",
            name="slack_token_refused",
            field=models.CharField(blank=True, db_default="", default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="site",
            name="slack_webhook_sealed",
            field=models.BinaryField(blank=True, db_default=b"", default=b""),
        ),
    ]
