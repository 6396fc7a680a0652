"""When Slack confirmed a member's Slack link (Membership.slack_checked_at).

Every link already made starts unconfirmed (null): links made before Sill asked Slack
(users.info) were saved on whoever typed them, so their clicks decide nothing until the check
(``refunds.slack_check_links``, refunds 0021's beat entry) confirms or clears them. The new
column is empty; the CHECK holds on every existing row.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0013_notice_delivery"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="slack_checked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("slack_checked_at__isnull", False), ("slack_user_id", ""), _negated=True
                ),
                name="membership_slack_checked_only_linked",
            ),
        ),
    ]
