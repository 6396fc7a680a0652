"""Beat: ask Stripe again which account each unnamed Stripe key acts on, every 15 minutes
(sill.rails.payment_account.learn_payment_accounts_task)."""

from django.db import migrations

SCHEDULE = "Name the Stripe account of keys Stripe has not named yet"
TASK = "rails.learn_payment_accounts"


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=15, period="minutes")
    PeriodicTask.objects.update_or_create(
        name=SCHEDULE, defaults={"task": TASK, "interval": every, "enabled": True}
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=SCHEDULE).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0010_railaccount_payment_account"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
