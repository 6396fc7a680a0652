"""Rotated audit keys carry the configured key's endorsement; the rows already there get one.

From this migration on, :mod:`audit.keys` trusts a rotated key only if the configured key
(``SILL_AUDIT_SIGNING_KEY``, or the key file under ``SILL_DATA_DIR``) endorsed it. The rows
that exist now were written by ``audit rotate-key`` before endorsements existed, so they are
endorsed here: trusted as of this migration (review them first if the database may have been
written by someone else). The signing goes through :func:`audit.keys.endorse` on purpose, not
a frozen copy: the endorsement must be the one the running code verifies. With no rows the
configured key is not even loaded (so no development key file is created). Reversing leaves
the endorsements: the column they are in goes with the schema step.
"""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def endorse_existing(apps: Apps, schema_editor: BaseDatabaseSchemaEditor | None) -> None:
    import nacl.exceptions
    import nacl.signing

    from audit import keys
    from audit.chain import b64url_decode

    AuditKey = apps.get_model("audit", "AuditKey")
    for row in AuditKey.objects.filter(endorsement="").order_by("valid_from"):
        try:
            public_key = b64url_decode(row.public_key)
            derived = keys.key_id_for(nacl.signing.VerifyKey(public_key))
        except (ValueError, TypeError, nacl.exceptions.ValueError, nacl.exceptions.TypeError):
            continue  # not a key rotate-key wrote: left unendorsed (ignored, logged)
        if derived != row.key_id:
            continue
        row.endorsement = keys.endorse(
            key_id=row.key_id, public_key=public_key, valid_from=row.valid_from
        )
        row.save(update_fields=["endorsement"])
    keys.forget_rotated_keys()


class Migration(migrations.Migration):
    dependencies = [("audit", "0012_drop_pattern_twins")]

    operations = [
        migrations.AddField(
            model_name="auditkey",
            name="endorsement",
            field=models.CharField(blank=True, default="", max_length=88),
        ),
        migrations.RunPython(endorse_existing, migrations.RunPython.noop, elidable=False),
    ]
