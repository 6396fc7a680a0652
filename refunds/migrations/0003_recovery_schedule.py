from django.db import migrations


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_minute, _ = IntervalSchedule.objects.get_or_create(every=1, period="minutes")
    PeriodicTask.objects.update_or_create(
        name="Recover stuck refunds",
        defaults={"task": "refunds.recover_stuck", "interval": every_minute, "enabled": True},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name="Recover stuck refunds"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0002_refund_lease_and_nullable_order"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
