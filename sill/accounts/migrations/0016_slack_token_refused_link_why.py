"""Why a member's Slack link was taken away (Membership.slack_link_why) and whether Slack
refuses the site's bot token (Site.slack_token_refused, slack_token_refused_at), so Settings →
Slack can say both. Empty on every existing row: the next link check fills them in."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("accounts", "0015_membership_slack_team_id")]

    operations = [
        migrations.AddField(
            model_name="site",
            name="slack_token_refused",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddField(
            model_name="site",
            name="slack_token_refused_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="membership",
            name="slack_link_why",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
    ]
