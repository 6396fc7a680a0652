"""Give every existing site the coded default reasons, now that no page seeds them on GET.

New sites get them from whoever creates the site (``manage.py demo`` today). This runs the
real service, not historical models: the reason tree is a treebeard materialised path that
only the service knows how to insert into, and the seed must write its signed
``reason_change`` record like every other seeding did. It therefore waits for the latest
``accounts`` and ``audit`` migrations, whose models the service uses. Idempotent; a no-op on
an empty database.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def seed_default_reasons(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from refunds.reasons.services import ensure_default_reasons
    from sill.accounts.models import Site

    for site in Site.objects.order_by("pk"):
        ensure_default_reasons(site)


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0010_rename_reason_outcome_code"),
        # It runs today's services, so it needs their schema. Pinned (it was ``__latest__``,
        # which made any new migration of these apps an unapplied dependency of this applied
        # one: Django refuses to migrate such a database at all).
        ("accounts", "0011_seal_slack_webhook"),
        ("audit", "0010_background_verification"),
    ]

    operations = [migrations.RunPython(seed_default_reasons, migrations.RunPython.noop)]
