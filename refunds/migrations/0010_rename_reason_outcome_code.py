from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0009_staff_idempotency"),
    ]

    operations = [
        migrations.RenameField(model_name="refund", old_name="reason", new_name="outcome_code"),
    ]
