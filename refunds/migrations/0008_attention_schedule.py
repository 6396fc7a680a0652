from django.db import migrations


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_minute, _ = IntervalSchedule.objects.get_or_create(every=1, period="minutes")
    PeriodicTask.objects.update_or_create(
        name="Ask the rail about refunds that need attention",
        defaults={"task": "refunds.check_attention", "interval": every_minute, "enabled": True},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name="Ask the rail about refunds that need attention"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0007_needs_attention_and_fencing"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
