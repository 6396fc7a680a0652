"""Re-encrypt stored rail credentials in the version-2 format, bound to their site and rail.

Blobs written by 0001's code (a ``SecretBox`` with no associated data) and blobs under a key of
``SILL_SECRET_KEY_FALLBACKS`` are rewritten under the current ``SECRET_KEY``. A credential that
no key can read is left as it is: its rail is refused with a message until the key is
re-entered on Settings → Rails. Reversing writes the legacy format back, so the code of 0001
can read the credentials again.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from sill.rails.secrets import (
    RailSecretUnreadable,
    SecretBinding,
    decrypt_secret,
    encrypt_legacy_secret,
    reencrypted,
)


def _accounts(apps: Any) -> Any:
    return apps.get_model("rails", "RailAccount").objects.exclude(secret_encrypted=b"")


def forwards(apps: Any, schema_editor: Any) -> None:
    for account in _accounts(apps).iterator():
        binding = SecretBinding(site_id=str(account.site_id), rail=account.rail)
        try:
            blob = reencrypted(account.secret_encrypted, binding=binding)
        except RailSecretUnreadable:
            continue
        if blob is not None:
            account.secret_encrypted = blob
            account.save(update_fields=["secret_encrypted"])


def backwards(apps: Any, schema_editor: Any) -> None:
    for account in _accounts(apps).iterator():
        binding = SecretBinding(site_id=str(account.site_id), rail=account.rail)
        try:
            plain = decrypt_secret(account.secret_encrypted, binding=binding)
        except RailSecretUnreadable:
            continue
        account.secret_encrypted = encrypt_legacy_secret(plain)
        account.save(update_fields=["secret_encrypted"])


class Migration(migrations.Migration):
    dependencies = [
        ("rails", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
