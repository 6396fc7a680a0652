from django.db import migrations

NAME = "Confirm Slack links with Slack"


def schedule(apps, schema_editor):
    # Links made before Sill asked Slack who a Slack user is (and any Slack could not confirm
    # then) are asked again on each tick until Slack confirms or contradicts them
    # (refunds/review/slack_link_checks.py); a site has a handful of links, so this is cheap.
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=15, period="minutes")
    PeriodicTask.objects.update_or_create(
        name=NAME,
        defaults={"task": "refunds.slack_check_links", "interval": every, "enabled": True},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0014_membership_slack_checked_at"),
        ("refunds", "0020_reconcile_customer_credits"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
