"""Encryption of rail credentials at rest (PyNaCl ``SecretBox``, XSalsa20-Poly1305).

The box key is derived from ``settings.SECRET_KEY`` under a domain tag, so the stored blobs
are useless without the deployment's secret and the key is never reused for anything else.

Rotation: changing ``SECRET_KEY`` makes every stored rail credential unreadable
(:class:`RailSecretUnreadable`). There is deliberately no key ring: after a rotation, an owner
re-enters each rail's API key on ``/settings/rails/``.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from nacl.exceptions import CryptoError
from nacl.secret import SecretBox

from sill.errors import SillError

_DOMAIN = b"sill-rail-secrets-v1"


class RailSecretUnreadable(SillError):
    """A stored credential that this deployment's ``SECRET_KEY`` cannot decrypt."""

    code = "rail_secret_unreadable"
    status = 409


def _box() -> SecretBox:
    # Derived on every call (cheap) so a changed setting, e.g. under override_settings, applies.
    key = hashlib.blake2b(
        _DOMAIN + b"\x00" + settings.SECRET_KEY.encode(), digest_size=SecretBox.KEY_SIZE
    ).digest()
    return SecretBox(key)


def encrypt_secret(plain: str) -> bytes:
    """Nonce + ciphertext of ``plain``; ``b""`` for an empty secret (nothing stored)."""
    if not plain:
        return b""
    return bytes(_box().encrypt(plain.encode()))


def decrypt_secret(blob: bytes | memoryview | None) -> str:
    """The plain secret; ``""`` when none is stored. Raises :class:`RailSecretUnreadable`."""
    if not blob:
        return ""
    try:
        return _box().decrypt(bytes(blob)).decode()
    except (CryptoError, UnicodeDecodeError) as exc:
        raise RailSecretUnreadable(
            "A stored rail credential cannot be decrypted: SECRET_KEY changed since it was "
            "saved, or the stored value is corrupt. Re-enter the rail's API key."
        ) from exc
