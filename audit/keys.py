"""Sill's audit signing key and the public keys that verify old records.

- The signing key is ``settings.SILL_AUDIT_SIGNING_KEY`` (a base64url 32-byte ed25519 seed).
  When that is unset (development, tests) a seed is generated once and kept at
  ``SILL_DATA_DIR/audit-signing-key`` (mode 0600), so records stay verifiable across restarts.
- ``key_id`` is ``"sill-" + sha256(public key).hexdigest()[:16]``: derived, never configured,
  so a record's ``key_id`` always names the key that signed it.
- Rotation: ``manage.py audit rotate-key`` (:func:`rotate_key`) makes a new key, seals its
  seed with SECRET_KEY in an :class:`~audit.models.AuditKey` row and makes it valid from
  ``SILL_AUDIT_KEY_SWITCH_SECONDS`` later. Windows follow from the order: the configured key
  signs until the first rotated key is valid, each rotated key until the next one is
  (:func:`key_windows`). Every process reloads the rotated keys at least every
  :data:`RELOAD_SECONDS`, well within the switch delay, so each record is signed by the key
  valid at its ``recorded_at``; verification refuses one signed outside its key's window.
- Legacy: public keys listed in ``SILL_DATA_DIR/audit-public-keys.json``
  (``{"<key_id>": "<base64url public key>"}``), from before rotation existed, verify records
  at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.chain import b64url_decode, b64url_encode

SIGNING_KEY_FILE = "audit-signing-key"
PUBLIC_KEYS_FILE = "audit-public-keys.json"


def key_id_for(verify_key: nacl.signing.VerifyKey) -> str:
    return "sill-" + hashlib.sha256(bytes(verify_key)).hexdigest()[:16]


RELOAD_SECONDS = 15.0


@dataclass(frozen=True)
class KeyWindow:
    """A public key and when it may sign: ``[valid_from, valid_until)``; None is unbounded."""

    key_id: str
    public_key: bytes
    valid_from: datetime | None
    valid_until: datetime | None

    def valid_at(self, at: datetime) -> bool:
        return (self.valid_from is None or self.valid_from <= at) and (
            self.valid_until is None or at < self.valid_until
        )


def signing_key(at: datetime | None = None) -> tuple[str, nacl.signing.SigningKey]:
    """``(key_id, SigningKey)`` that signs what is recorded at ``at`` (default: now)."""
    configured = _signing_key(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR))
    at = at or datetime.now().astimezone()
    current = configured
    for row in _rotated():
        if row.valid_from > at:
            break
        current = (row.key_id, _unseal(row))
    return current


def public_keys() -> dict[str, nacl.signing.VerifyKey]:
    """Every key a record may name: configured, rotated and legacy (no windows)."""
    keys = dict(_public_keys(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR)))
    for row in _rotated():
        keys[row.key_id] = nacl.signing.VerifyKey(b64url_decode(row.public_key))
    return keys


def key_windows() -> dict[str, KeyWindow]:
    """Every key with the window in which it may sign (legacy keys: unbounded)."""
    configured_id, configured = _signing_key(
        settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR)
    )
    rotated = _rotated()
    windows = {
        key_id: KeyWindow(key_id, bytes(key), None, None)
        for key_id, key in _public_keys(
            settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR)
        ).items()
        if key_id != configured_id
    }
    starts = [row.valid_from for row in rotated]
    windows[configured_id] = KeyWindow(
        configured_id, bytes(configured.verify_key), None, starts[0] if starts else None
    )
    for i, row in enumerate(rotated):
        until = starts[i + 1] if i + 1 < len(starts) else None
        windows[row.key_id] = KeyWindow(
            row.key_id, b64url_decode(row.public_key), row.valid_from, until
        )
    return windows


def rotate_key(*, now: datetime | None = None) -> KeyWindow:
    """Make a new signing key, valid from ``SILL_AUDIT_KEY_SWITCH_SECONDS`` after ``now``.

    Refused (``ValueError``) while an earlier rotation has not yet taken effect. The caller
    records the change in each site's log (``key_change``).
    """
    from audit.models import AuditKey
    from sill.rails.secrets import encrypt_secret

    now = now or datetime.now().astimezone()
    valid_from = now + timedelta(seconds=settings.SILL_AUDIT_KEY_SWITCH_SECONDS)
    if AuditKey.objects.filter(valid_from__gt=now).exists():
        raise ValueError("a rotated key is waiting to take effect; try again after it does")
    seed = nacl.signing.SigningKey.generate()
    key_id = key_id_for(seed.verify_key)
    public = b64url_encode(bytes(seed.verify_key))
    AuditKey.objects.create(
        key_id=key_id,
        public_key=public,
        sealed_seed=encrypt_secret(b64url_encode(seed.encode()), binding=_binding(key_id)),
        valid_from=valid_from,
    )
    forget_rotated_keys()
    return KeyWindow(key_id, bytes(seed.verify_key), valid_from, None)


def forget_rotated_keys() -> None:
    """Drop this process's copy of the rotated keys (the next use reloads them)."""
    _ROTATED.clear()


_ROTATED: dict[str, tuple[float, list[Any]]] = {}


def _rotated() -> list[Any]:
    from audit.models import AuditKey

    cached = _ROTATED.get("rows")
    if cached is not None and time.monotonic() - cached[0] < RELOAD_SECONDS:
        return cached[1]
    rows = list(AuditKey.objects.order_by("valid_from"))
    _ROTATED["rows"] = (time.monotonic(), rows)
    return rows


def _binding(key_id: str) -> Any:
    from sill.rails.secrets import SecretBinding

    return SecretBinding(site_id="sill-audit-keys", rail="audit", field=key_id)


def register_sealed_seeds() -> None:
    """The rotated keys' seeds are sealed with SECRET_KEY: ``manage.py rails
    reencrypt-secrets`` re-encrypts them after a rotation. One it could not, left behind when
    the old key leaves the fallbacks, would stop every append while that key is in force."""
    from audit.models import AuditKey
    from sill.rails.secrets import SealedField, register_sealed_field

    register_sealed_field(
        SealedField(
            model=AuditKey, field="sealed_seed", binding=lambda row: _binding(row.key_id),
            name=lambda row: f"audit signing key {row.key_id}", site_field=None,
            what_to_do=(
                "put the SECRET_KEY it was sealed under back into SILL_SECRET_KEY_FALLBACKS: "
                "records it signed still verify (its public key is kept), but while it is the "
                "key in force nothing can be signed"
            ),
        )
    )  # fmt: skip


@lru_cache(maxsize=16)
def _unseal_cached(key_id: str, sealed: bytes, secret: str) -> nacl.signing.SigningKey:
    from sill.rails.secrets import decrypt_secret

    return nacl.signing.SigningKey(b64url_decode(decrypt_secret(sealed, binding=_binding(key_id))))


def _unseal(row: Any) -> nacl.signing.SigningKey:
    return _unseal_cached(row.key_id, bytes(row.sealed_seed), settings.SECRET_KEY)


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
