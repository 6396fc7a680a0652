"""Fill the subject columns of records written before they existed, from their payloads.

The historical model's manager is a plain one (the append-only queryset is not used in
migrations), so ``bulk_update`` reaches the rows; hashes, signatures and payloads are not
touched, so every chain verifies exactly as before. The rule is copied from
``audit.services.subject_of`` on purpose: a migration must not change when that code does.
"""

import json
from typing import Any

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MAX_LENGTH = 40
BATCH = 500


def _subject(body: Any, key: str) -> str:
    value = body.get(key) if isinstance(body, dict) else None
    if isinstance(value, str) and 0 < len(value) <= MAX_LENGTH:
        return value
    return ""


def backfill(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    AuditRecord = apps.get_model("audit", "AuditRecord")
    # Pages by primary key, each read in full before it is written: SQLite gives no isolation
    # between a cursor still being read and updates on the same connection.
    last_pk = 0
    while True:
        page = list(
            AuditRecord.objects.filter(pk__gt=last_pk).order_by("pk").only("pk", "payload")[:BATCH]
        )
        if not page:
            return
        last_pk = page[-1].pk
        changed = []
        for record in page:
            body = json.loads(record.payload).get("body")
            record.subject_refund_id = _subject(body, "refund_id")
            record.subject_order_id = _subject(body, "order_id")
            if record.subject_refund_id or record.subject_order_id:
                changed.append(record)
        AuditRecord.objects.bulk_update(changed, ["subject_refund_id", "subject_order_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_record_subject"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
