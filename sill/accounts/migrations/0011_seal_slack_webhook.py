"""Seal each site's Slack incoming-webhook URL (a credential) like its signing secret.

The URL moves from a plain column into ``slack_webhook_sealed``, encrypted under SECRET_KEY
and bound to the site (sill.rails.secrets; binding rail "slack", field "webhook_url", as
refunds.review.slack uses it). Reversible: the reverse opens each blob into the old column.
"""

from django.db import migrations, models

from sill.rails.secrets import SecretBinding, decrypt_secret, encrypt_secret


def _binding(site_id: str) -> SecretBinding:
    return SecretBinding(site_id=site_id, rail="slack", field="webhook_url")


def seal(apps, schema_editor):
    Site = apps.get_model("accounts", "Site")
    for site in Site.objects.exclude(slack_webhook_url="").only("pk", "slack_webhook_url"):
        site.slack_webhook_sealed = encrypt_secret(
            site.slack_webhook_url, binding=_binding(site.pk)
        )
        site.save(update_fields=["slack_webhook_sealed"])


def unseal(apps, schema_editor):
    Site = apps.get_model("accounts", "Site")
    for site in Site.objects.exclude(slack_webhook_sealed=b"").only("pk", "slack_webhook_sealed"):
        site.slack_webhook_url = decrypt_secret(
            bytes(site.slack_webhook_sealed), binding=_binding(site.pk)
        )
        site.save(update_fields=["slack_webhook_url"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0010_site_refund_window"),
    ]

    operations = [
        migrations.AddField(
            model_name="site",
            name="slack_webhook_sealed",
            field=models.BinaryField(blank=True, default=b""),
        ),
        migrations.RunPython(seal, unseal),
        migrations.RemoveField(
            model_name="site",
            name="slack_webhook_url",
        ),
    ]
