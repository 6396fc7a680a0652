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
  valid at its ``recorded_at``; verification refuses one signed outside its key's window,
  and one signed by a key whose window starts before that of a key that already signed an
  earlier record (:func:`audit.chain.verify_chain`): a retired key cannot sign on by
  backdating.
- Endorsement: the configured key is the trust anchor (the key outsiders pin). A rotated key
  is trusted only if its row carries the configured key's ed25519 signature over
  :func:`endorsement_statement` (its key id, public key and ``valid_from``), which
  :func:`rotate_key` writes. Someone who can write the database but holds neither SECRET_KEY
  nor the configured key cannot add a key of their own: :func:`key_windows`,
  :func:`public_keys` and :func:`signing_key` ignore a row without a valid endorsement (and
  log an error naming it at each reload), so records it signs fail verification.
- Legacy: public keys listed in ``SILL_DATA_DIR/audit-public-keys.json``
  (``{"<key_id>": "<base64url public key>"}``), from before rotation existed, verify records
  at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.chain import b64url_decode, b64url_encode

log = logging.getLogger(__name__)

SIGNING_KEY_FILE = "audit-signing-key"
PUBLIC_KEYS_FILE = "audit-public-keys.json"
# Domain separation: an endorsement can never be read as a record, checkpoint or receipt
# signature (audit/verify_export.py repeats it).
ENDORSEMENT_CONTEXT = b"sill-audit-key-endorsement-v1\n"


def key_id_for(verify_key: nacl.signing.VerifyKey) -> str:
    return "sill-" + hashlib.sha256(bytes(verify_key)).hexdigest()[:16]


RELOAD_SECONDS = 15.0


@dataclass(frozen=True)
class KeyWindow:
    """A public key and when it may sign: ``[valid_from, valid_until)``; None is unbounded.

    A rotated key carries its ``endorsement`` (base64url) by the configured key
    ``endorsed_by``; the configured and legacy keys carry none.
    """

    key_id: str
    public_key: bytes
    valid_from: datetime | None
    valid_until: datetime | None
    endorsement: str | None = None
    endorsed_by: str | None = None

    def valid_at(self, at: datetime) -> bool:
        return (self.valid_from is None or self.valid_from <= at) and (
            self.valid_until is None or at < self.valid_until
        )


def configured_key() -> tuple[str, nacl.signing.SigningKey]:
    """``(key_id, SigningKey)`` of the configured key: it signs until the first rotation and
    endorses every rotated key (the trust anchor)."""
    return _signing_key(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR))


def endorsement_statement(key_id: str, public_key: bytes, valid_from: datetime) -> bytes:
    """What the configured key signs to endorse a rotated key::

        sill-audit-key-endorsement-v1\\n<key id>\\n<base64url public key>\\n<valid_from>\\n

    ``valid_from`` in UTC to the millisecond (``2026-11-29T20:14:03.125Z``).
    """
    return (
        ENDORSEMENT_CONTEXT
        + (f"{key_id}\n{b64url_encode(public_key)}\n{utc_ms(valid_from)}\n").encode()
    )


def endorse(*, key_id: str, public_key: bytes, valid_from: datetime) -> str:
    """The configured key's endorsement of a rotated key (base64url, 86 characters)."""
    _, anchor = configured_key()
    statement = endorsement_statement(key_id, public_key, valid_from)
    return b64url_encode(anchor.sign(statement).signature)


def is_endorsed(
    anchor: nacl.signing.VerifyKey,
    *,
    key_id: str,
    public_key: bytes,
    valid_from: datetime,
    endorsement: str,
) -> bool:
    """Whether ``endorsement`` is ``anchor``'s signature endorsing that key and window."""
    try:
        anchor.verify(
            endorsement_statement(key_id, public_key, valid_from), b64url_decode(endorsement)
        )
    except (ValueError, TypeError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        return False
    return True


def signing_key(at: datetime | None = None) -> tuple[str, nacl.signing.SigningKey]:
    """``(key_id, SigningKey)`` that signs what is recorded at ``at`` (default: now).

    Only endorsed rotated keys are considered: a row someone wrote into the database never
    signs (nor stops Sill from signing with its own keys)."""
    configured = configured_key()
    at = at or datetime.now().astimezone()
    current = configured
    for row in _rotated():
        if row.valid_from > at:
            break
        current = (row.key_id, _unseal(row))
    return current


def public_keys() -> dict[str, nacl.signing.VerifyKey]:
    """Every key a record may name: configured, endorsed rotated and legacy (no windows)."""
    keys = dict(_public_keys(settings.SILL_AUDIT_SIGNING_KEY, str(settings.SILL_DATA_DIR)))
    for row in _rotated():
        keys[row.key_id] = nacl.signing.VerifyKey(b64url_decode(row.public_key))
    return keys


def key_windows() -> dict[str, KeyWindow]:
    """Every key with the window in which it may sign (legacy keys: unbounded); rotated keys
    only when endorsed, each window ending where the next endorsed key's starts."""
    configured_id, configured = configured_key()
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
            row.key_id,
            b64url_decode(row.public_key),
            row.valid_from,
            until,
            endorsement=row.endorsement,
            endorsed_by=configured_id,
        )
    return windows


def rotate_key(*, now: datetime | None = None) -> KeyWindow:
    """Make a new signing key, valid from ``SILL_AUDIT_KEY_SWITCH_SECONDS`` after ``now``.

    Refused (``ValueError``) while an earlier rotation has not yet taken effect. The row
    carries the configured key's endorsement. The caller records the change in each site's
    log (``key_change``).
    """
    from audit.models import AuditKey
    from sill.rails.secrets import encrypt_secret

    now = now or datetime.now().astimezone()
    # A whole millisecond, as the endorsement states it and records are timed; rounded up, so
    # a record already timed in the current millisecond stays in the old key's window.
    valid_from = _ms_ceiling(now + timedelta(seconds=settings.SILL_AUDIT_KEY_SWITCH_SECONDS))
    # Read afresh (another process may have just rotated); a row nobody endorsed does not
    # count, or anyone who can write the database could block rotations with one.
    anchor = configured_key()[1].verify_key
    if any(_row_is_endorsed(row, anchor) for row in AuditKey.objects.filter(valid_from__gt=now)):
        raise ValueError("a rotated key is waiting to take effect; try again after it does")
    seed = nacl.signing.SigningKey.generate()
    key_id = key_id_for(seed.verify_key)
    public = b64url_encode(bytes(seed.verify_key))
    AuditKey.objects.create(
        key_id=key_id,
        public_key=public,
        sealed_seed=encrypt_secret(b64url_encode(seed.encode()), binding=_binding(key_id)),
        valid_from=valid_from,
        endorsement=endorse(
            key_id=key_id, public_key=bytes(seed.verify_key), valid_from=valid_from
        ),
    )
    forget_rotated_keys()
    return KeyWindow(key_id, bytes(seed.verify_key), valid_from, None)


def forget_rotated_keys() -> None:
    """Drop this process's copy of the rotated keys (the next use reloads them)."""
    _ROTATED.clear()


# The endorsed rotated keys, by the id of the configured key that endorsed them.
_ROTATED: dict[str, tuple[float, list[Any]]] = {}


def _rotated() -> list[Any]:
    """The endorsed :class:`~audit.models.AuditKey` rows, by ``valid_from``."""
    from audit.models import AuditKey

    anchor_id, anchor = configured_key()
    cached = _ROTATED.get(anchor_id)
    if cached is not None and time.monotonic() - cached[0] < RELOAD_SECONDS:
        return cached[1]
    rows = []
    for row in AuditKey.objects.order_by("valid_from"):
        if _row_is_endorsed(row, anchor.verify_key):
            rows.append(row)
        else:
            # Loud, but never fatal: such a row is what a database-only intruder writes, and
            # it must not stop Sill signing with its own keys.
            log.error(
                "audit key %s is not endorsed by the configured audit key %s: ignored (it "
                "signs nothing, and records naming it fail verification)",
                row.key_id, anchor_id,
            )  # fmt: skip
    _ROTATED[anchor_id] = (time.monotonic(), rows)
    return rows


def _row_is_endorsed(row: Any, anchor: nacl.signing.VerifyKey) -> bool:
    try:
        public_key = b64url_decode(row.public_key)
    except ValueError:
        return False
    if len(public_key) != 32 or row.key_id != key_id_for(nacl.signing.VerifyKey(public_key)):
        return False
    return is_endorsed(
        anchor,
        key_id=row.key_id,
        public_key=public_key,
        valid_from=row.valid_from,
        endorsement=row.endorsement or "",
    )


def _ms_ceiling(at: datetime) -> datetime:
    return at + timedelta(microseconds=-at.microsecond % 1000)


def utc_ms(at: datetime) -> str:
    """``at`` in UTC to the millisecond (``2026-11-29T20:14:03.125Z``), as endorsements state it."""
    at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


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
