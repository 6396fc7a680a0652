from django.db import migrations

NAME = "Reconcile refunds with the rails"


def schedule(apps, schema_editor):
    # A five-minute tick; each rail account's run is due every SILL_RECONCILE_EVERY_MINUTES
    # (refunds/reconcile/runs.py), so changing that setting needs no migration.
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_five, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.update_or_create(
        name=NAME, defaults={"task": "refunds.reconcile", "interval": every_five, "enabled": True}
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0013_reconciliation_inbox"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
