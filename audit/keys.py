"""Sill's audit signing key and the public keys that verify old records.

- The signing key is ``settings.SILL_AUDIT_SIGNING_KEY`` (a base64url 32-byte ed25519 seed).
  When that is unset (development, tests) a seed is generated once and kept at
  ``SILL_DATA_DIR/audit-signing-key`` (mode 0600), so records stay verifiable across restarts.
- ``key_id`` is ``"sill-" + sha256(public key).hexdigest()[:16]``: derived, never configured,
  so a record's ``key_id`` always names the key that signed it.
- Rotation: before changing the signing key, add the old public key to
  ``SILL_DATA_DIR/audit-public-keys.json`` (``{"<key_id>": "<base64url public key>"}``) so
  records it signed keep verifying.

Both are cached in-process (keyed by the settings they come from); restart after a rotation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import nacl.exceptions
import nacl.signing
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.chain import b64url_decode, b64url_encode

SIGNING_KEY_FILE = "audit-signing-key"
PUBLIC_KEYS_FILE = "audit-public-keys.json"


def key_id_for(verify_key: nacl.signing.VerifyKey) -> str:
    return "sill-" + hashlib.sha256(bytes(verify_key)).hexdigest()[:16]


def signing_key() -> tuple[str, nacl.signing.SigningKey]:
    """``(key_id, SigningKey)`` that signs new audit records."""
    return _signing_key(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR))


def public_keys() -> dict[str, nacl.signing.VerifyKey]:
    """Every key a record may name: the current one plus those in ``audit-public-keys.json``."""
    return dict(_public_keys(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR)))


@lru_cache(maxsize=4)
def _signing_key(configured: str | None, data_dir: str) -> tuple[str, nacl.signing.SigningKey]:
    if configured:
        seed = _decode_seed(configured, "SILL_AUDIT_SIGNING_KEY")
    else:
        seed = _load_or_create_seed(Path(data_dir) / SIGNING_KEY_FILE)
    key = nacl.signing.SigningKey(seed)
    return key_id_for(key.verify_key), key


@lru_cache(maxsize=4)
def _public_keys(configured: str | None, data_dir: str) -> dict[str, nacl.signing.VerifyKey]:
    keys: dict[str, nacl.signing.VerifyKey] = {}
    path = Path(data_dir) / PUBLIC_KEYS_FILE
    if path.exists():
        try:
            listed = json.loads(path.read_text(encoding="utf-8"))
            for key_id, text in listed.items():
                keys[key_id] = nacl.signing.VerifyKey(b64url_decode(text))
        except (ValueError, AttributeError, TypeError, nacl.exceptions.ValueError) as exc:
            raise ImproperlyConfigured(
                f"{path} must map key ids to base64url 32-byte ed25519 public keys: {exc}"
            ) from exc
    current_id, current = _signing_key(configured, data_dir)
    keys[current_id] = current.verify_key
    return keys


def _decode_seed(text: str, source: str) -> bytes:
    try:
        seed = b64url_decode(text.strip())
    except ValueError:
        seed = b""
    if len(seed) != 32:
        raise ImproperlyConfigured(f"{source} must be a base64url-encoded 32-byte ed25519 seed")
    return seed


def _load_or_create_seed(path: Path) -> bytes:
    if not path.exists():
        # Write a temporary file and hard-link it into place: the link either creates the
        # whole file or fails because another process won the race, so nobody ever reads a
        # half-written seed, and both processes end up with the same key.
        seed = nacl.signing.SigningKey.generate().encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(b64url_encode(seed) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return _decode_seed(path.read_text(encoding="ascii"), str(path))
