"""Which Slack workspace a member's confirmed Slack link belongs to (Membership.slack_team_id).

Links confirmed before Sill recorded it start with none: their clicks are refused until the
check (``refunds.slack_check_links``) asks Slack again and fills it in, on its next run. The
new column is empty, so the CHECK holds on every existing row.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0014_membership_slack_checked_at"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="slack_team_id",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("slack_checked_at__isnull", True), _negated=True),
                    ("slack_team_id", ""),
                    _connector="OR",
                ),
                name="membership_slack_team_only_confirmed",
            ),
        ),
    ]
