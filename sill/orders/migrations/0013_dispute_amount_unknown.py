"""A dispute whose amount the rail gave in a form Sill cannot read is recorded with its amount
null and no currency (it refuses refunds of its charge like any dispute): the amount column
allows null, and the currency check allows "" exactly when the amount is null. Nothing is
rewritten: every dispute recorded so far has both."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0012_database_defaults"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="dispute",
            name="dispute_currency_iso",
        ),
        migrations.AlterField(
            model_name="dispute",
            name="amount_minor",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="dispute",
            name="currency",
            field=models.CharField(blank=True, max_length=3),
        ),
        migrations.AddConstraint(
            model_name="dispute",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("amount_minor__isnull", False), ("currency__regex", "^[A-Z]{3}$")),
                    models.Q(("amount_minor__isnull", True), ("currency", "")),
                    _connector="OR",
                ),
                name="dispute_currency_iso_or_amount_unknown",
            ),
        ),
    ]
