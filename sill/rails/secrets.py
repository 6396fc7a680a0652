"""Encryption of rail credentials at rest, bound to the site and rail they belong to.

Format (version 2, written by :func:`encrypt_secret`)::

    0x02 || nonce (24 bytes) || XChaCha20-Poly1305-IETF ciphertext and tag

The associated data is ``sill-rail-secret-v2`` followed by the site id, the rail name and the
field name (each length-prefixed), so a blob copied into another site's or another rail's row,
or into another field, fails authentication and is :class:`RailSecretUnreadable`: a credential
only ever decrypts for the account it was saved on. The AEAD key is derived from a secret key
under its own domain tag, so it is never reused for anything else.

Keys: encryption always uses ``settings.SECRET_KEY``. Decryption tries ``SECRET_KEY`` and then
each of ``settings.SECRET_KEY_FALLBACKS`` (set from ``SILL_SECRET_KEY_FALLBACKS``, as Django
uses it for signing), so rotating the secret key does not lose rail credentials as long as
the old key stays listed as a fallback until every credential has been re-encrypted.

Legacy blobs (version 1: a PyNaCl ``SecretBox``, nonce || ciphertext, no associated data and
no version byte) still decrypt, with any of the keys.

Re-encryption: :func:`open_secret` reports whether a blob is ``current`` (version 2 under
``SECRET_KEY``). ``RailAccount.get_secret`` rewrites a blob that is not current as soon as it
is read (a conditional update of that one column); ``manage.py rails reencrypt-secrets``
rewrites every sealed secret at once, which is what an operator runs after a rotation before
dropping the old key from the fallbacks; migration ``rails.0002`` did it once for the blobs
written before version 2 existed. Every column sealed this way is registered
(:func:`register_sealed_field`, from its app's ``ready()``: rail API keys and webhook signing
secrets, Slack's webhook and signing secret, the rotated audit signing keys), so the command
rewrites them all: one it missed would be lost with the old key.

Nothing here logs, returns in an error or renders a secret.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models, transaction
from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.secret import SecretBox
from nacl.utils import random

from sill.errors import SillError

VERSION_2 = 0x02
_V2_KEY_DOMAIN = b"sill-rail-secrets-v2-key"
_V2_AAD_TAG = b"sill-rail-secret-v2"
_V1_KEY_DOMAIN = b"sill-rail-secrets-v1"
_NONCE_SIZE = bindings.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
_MIN_V2_SIZE = 1 + _NONCE_SIZE + bindings.crypto_aead_xchacha20poly1305_ietf_ABYTES

# What an operator does about an unreadable credential; shown by the rails page and in the
# RailDisabled message a refund on that rail fails with.
WHAT_TO_DO = (
    "re-enter the API key on Settings → Rails; if SECRET_KEY was changed on the server, "
    "whoever runs Sill can add the old one to SILL_SECRET_KEY_FALLBACKS instead"
)


class RailSecretUnreadable(SillError):
    """A stored credential that neither ``SECRET_KEY`` nor any fallback key can decrypt."""

    code = "rail_secret_unreadable"
    status = 409


@dataclass(frozen=True)
class SecretBinding:
    """Where a credential belongs: its blob decrypts only under the same binding."""

    site_id: str
    rail: str
    field: str = "secret"

    def aad(self) -> bytes:
        parts = (self.site_id, self.rail, self.field)
        if not all(parts):
            raise ValueError("a rail secret needs a site id, a rail and a field name")
        # Length prefixes make the encoding injective: ("ab", "c") never equals ("a", "bc").
        encoded = (p.encode() for p in parts)
        return _V2_AAD_TAG + b"".join(len(p).to_bytes(2, "big") + p for p in encoded)


@dataclass(frozen=True)
class OpenedSecret:
    """A decrypted credential; ``current`` when its blob needs no re-encryption."""

    plain: str
    current: bool
    # Why it is not current, for operators' logs and the reencrypt command (never the secret).
    stale_because: str = ""


def encrypt_secret(plain: str, *, binding: SecretBinding) -> bytes:
    """A version-2 blob of ``plain`` under ``SECRET_KEY``; ``b""`` for an empty secret."""
    if not plain:
        return b""
    nonce = random(_NONCE_SIZE)
    sealed = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
        plain.encode(), binding.aad(), nonce, _v2_key(settings.SECRET_KEY)
    )
    return bytes([VERSION_2]) + nonce + sealed


def decrypt_secret(blob: bytes | memoryview | None, *, binding: SecretBinding) -> str:
    """The plain secret; ``""`` when none is stored. Raises :class:`RailSecretUnreadable`."""
    return open_secret(blob, binding=binding).plain


def open_secret(blob: bytes | memoryview | None, *, binding: SecretBinding) -> OpenedSecret:
    """Decrypt with the current key, then each fallback; legacy blobs too.

    Raises :class:`RailSecretUnreadable` when no key opens the blob for ``binding``.
    """
    data = bytes(blob) if blob else b""
    if not data:
        return OpenedSecret(plain="", current=True)
    keys = _secret_keys()
    if data[0] == VERSION_2 and len(data) >= _MIN_V2_SIZE:
        aad = binding.aad()
        nonce, sealed = data[1 : 1 + _NONCE_SIZE], data[1 + _NONCE_SIZE :]
        for index, secret_key in enumerate(keys):
            try:
                plain = bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(
                    sealed, aad, nonce, _v2_key(secret_key)
                )
            except CryptoError:
                continue
            return _opened(plain, current=index == 0, stale_because="a fallback key")
    # Not version 2 (or, one time in 256, a legacy nonce that happens to start with 0x02).
    # A version-2 blob of another binding fails here too: a SecretBox under the legacy key
    # derivation cannot authenticate it.
    for secret_key in keys:
        try:
            plain = SecretBox(_v1_key(secret_key)).decrypt(data)
        except CryptoError:
            continue
        return _opened(plain, current=False, stale_because="the legacy format")
    raise RailSecretUnreadable(
        f"The stored {binding.field} of the {binding.rail} rail cannot be decrypted: it was "
        "saved under a SECRET_KEY that is neither the current one nor in "
        "SILL_SECRET_KEY_FALLBACKS, or it belongs to another site or rail, or it is corrupt. "
        f"To fix it, {WHAT_TO_DO}."
    )


def reencrypted(blob: bytes | memoryview | None, *, binding: SecretBinding) -> bytes | None:
    """A current blob for the same secret, or ``None`` when ``blob`` is already current.

    Raises :class:`RailSecretUnreadable` like :func:`open_secret`.
    """
    opened = open_secret(blob, binding=binding)
    if opened.current:
        return None
    return encrypt_secret(opened.plain, binding=binding)


@dataclass(frozen=True)
class SealedField:
    """A model column holding secrets sealed with :func:`encrypt_secret`.

    ``binding(row)`` is what the row's blob is bound to; ``name(row)`` names the row in the
    re-encryption report (never the secret); ``site_field`` is the lookup of the row's site
    id (``None``: not a site's, e.g. the audit signing keys); ``what_to_do`` is the report's
    advice when no key opens the blob.
    """

    model: type[models.Model]
    field: str
    binding: Callable[[Any], SecretBinding]
    name: Callable[[Any], str]
    site_field: str | None
    what_to_do: str


_SEALED: dict[tuple[str, str], SealedField] = {}


def register_sealed_field(sealed: SealedField) -> None:
    """Make ``manage.py rails reencrypt-secrets`` rewrite ``sealed`` too (idempotent)."""
    _SEALED[(sealed.model._meta.label, sealed.field)] = sealed


def sealed_fields() -> list[SealedField]:
    """Every registered sealed column, in the order they were registered."""
    return list(_SEALED.values())


def reencrypt_row(sealed: SealedField, pk: Any, *, dry_run: bool = False) -> tuple[Any, str]:
    """Rewrite one row's sealed secret under ``SECRET_KEY`` if it needs it, under the row's
    lock (a secret saved meanwhile is neither lost nor overwritten).

    Returns the row and why it was (with ``dry_run``: would be) rewritten, ``""`` when it is
    current or empty. Raises :class:`RailSecretUnreadable` if no key opens it.
    """
    with transaction.atomic():
        # NO KEY: a site's row is also what every decision's foreign keys lock (KEY SHARE),
        # and rewriting a secret column must not make them wait.
        row = sealed.model._default_manager.select_for_update(no_key=True).get(pk=pk)
        binding = sealed.binding(row)
        opened = open_secret(getattr(row, sealed.field), binding=binding)
        if opened.current:
            return row, ""
        if not dry_run:
            fresh = encrypt_secret(opened.plain, binding=binding)
            sealed.model._default_manager.filter(pk=pk).update(**{sealed.field: fresh})
        return row, opened.stale_because


def encrypt_legacy_secret(plain: str) -> bytes:
    """A version-1 ``SecretBox`` blob under ``SECRET_KEY``: only for migrating back to 0001."""
    if not plain:
        return b""
    return bytes(SecretBox(_v1_key(settings.SECRET_KEY)).encrypt(plain.encode()))


def _opened(plain: bytes, *, current: bool, stale_because: str) -> OpenedSecret:
    try:
        text = plain.decode()
    except UnicodeDecodeError as exc:
        # Authenticated yet not UTF-8 cannot come from encrypt_secret; treat it as corrupt.
        raise RailSecretUnreadable(
            f"A stored rail credential is corrupt. To fix it, {WHAT_TO_DO}."
        ) from exc
    return OpenedSecret(plain=text, current=current, stale_because="" if current else stale_because)


def _secret_keys() -> list[str]:
    # Read on every call (cheap) so a changed setting, e.g. under override_settings, applies.
    fallbacks = list(getattr(settings, "SECRET_KEY_FALLBACKS", []) or [])
    return [settings.SECRET_KEY, *(k for k in fallbacks if k and k != settings.SECRET_KEY)]


def _v2_key(secret_key: str) -> bytes:
    return hashlib.blake2b(
        _V2_KEY_DOMAIN + b"\x00" + secret_key.encode(),
        digest_size=bindings.crypto_aead_xchacha20poly1305_ietf_KEYBYTES,
    ).digest()


def _v1_key(secret_key: str) -> bytes:
    # Exactly the version-1 derivation: blobs written before version 2 depend on it.
    return hashlib.blake2b(
        _V1_KEY_DOMAIN + b"\x00" + secret_key.encode(), digest_size=SecretBox.KEY_SIZE
    ).digest()
