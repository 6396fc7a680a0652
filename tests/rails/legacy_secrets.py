"""Rail credentials as Sill stored them before version 2 (no associated data), for tests."""

from __future__ import annotations

import hashlib

from nacl.secret import SecretBox


def legacy_box(secret_key: str) -> SecretBox:
    """The box Sill used before version 2, derived exactly as that code did."""
    key = hashlib.blake2b(
        b"sill-rail-secrets-v1" + b"\x00" + secret_key.encode(), digest_size=SecretBox.KEY_SIZE
    ).digest()
    return SecretBox(key)


def legacy_blob(plain: str, secret_key: str) -> bytes:
    return bytes(legacy_box(secret_key).encrypt(plain.encode()))
