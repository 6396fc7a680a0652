"""The chain head keeps its last record's ``recorded_at``; existing heads take it from that
record (one UPDATE per database, not per site)."""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import OuterRef, Subquery


def fill_from_last_records(apps: Apps, schema_editor: BaseDatabaseSchemaEditor | None) -> None:
    AuditChainHead = apps.get_model("audit", "AuditChainHead")
    AuditRecord = apps.get_model("audit", "AuditRecord")
    last = AuditRecord.objects.filter(site_id=OuterRef("site_id"), seq=OuterRef("last_seq"))
    AuditChainHead.objects.filter(last_seq__gt=0).update(
        last_recorded_at=Subquery(last.values("created_at")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [("audit", "0013_auditkey_endorsement")]

    operations = [
        migrations.AddField(
            model_name="auditchainhead",
            name="last_recorded_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(fill_from_last_records, migrations.RunPython.noop, elidable=True),
    ]
