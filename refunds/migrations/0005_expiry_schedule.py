from django.db import migrations

# name → task; both run every minute (django-celery-beat's DatabaseScheduler).
SCHEDULES = {
    "Expire held refunds": "refunds.expire_held",
    "Notify owners of held refunds": "refunds.notify_pending_held",
}


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_minute, _ = IntervalSchedule.objects.get_or_create(every=1, period="minutes")
    for name, task in SCHEDULES.items():
        PeriodicTask.objects.update_or_create(
            name=name, defaults={"task": task, "interval": every_minute, "enabled": True}
        )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name__in=list(SCHEDULES)
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0004_refund_reasons"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
