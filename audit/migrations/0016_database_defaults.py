"""Database defaults for the NOT NULL columns earlier migrations added without one, the same
values as the models' defaults: a process older than a column (during an upgrade, or after
the code alone is rolled back) inserts rows that do not name it, and those inserts failed.
Only the columns' DEFAULT changes; no row is rewritten. tests/test_migration_defaults.py."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0015_verification_progress_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditchainhead",
            name="tree_frontier",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AlterField(
            model_name="auditkey",
            name="endorsement",
            field=models.CharField(blank=True, db_default="", default="", max_length=88),
        ),
        migrations.AlterField(
            model_name="auditrecord",
            name="subject_order_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=40),
        ),
        migrations.AlterField(
            model_name="auditrecord",
            name="subject_refund_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=40),
        ),
    ]
