"""Drop the ``varchar_pattern_ops`` twins of the order's, charge's and line item's id and key
indexes (PostgreSQL only): written on every purchase, never read
(``sill.indexes.dropping_pattern_twins``)."""

from django.db import migrations

from sill import indexes

drop, restore = indexes.dropping_pattern_twins(
    "orders",
    [
        ("order", "id"),
        ("order", "site"),
        ("charge", "id"),
        ("charge", "order"),
        ("lineitem", "order"),
    ],
)


class Migration(migrations.Migration):
    dependencies = [("orders", "0005_customer_email_any_case")]

    operations = [migrations.RunPython(drop, restore, elidable=False)]
