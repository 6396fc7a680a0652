"""The audit hash chain: canonical payloads, hashes, signatures and verification.

Pure logic: no Django, no ORM. A record, as :func:`verify_chain` reads it, is a mapping with
``site_id``, ``seq``, ``kind``, ``payload`` (the canonical JSON text that was hashed),
``prev_hash``, ``hash``, ``signature`` and ``key_id``, and optionally the columns Sill keeps
beside it unsigned (``created_at``, :data:`SUBJECT_COLUMNS`), checked against the payload.

- ``payload`` is the RFC 8785 (JCS) text of
  ``{"site_id", "seq", "kind", "recorded_at", "body"}``, so the columns that order and
  classify a record are covered by its hash: swapping two records cannot pass.
- ``hash = sha256(prev_hash.encode("ascii") + payload_bytes).hexdigest()``; the first record
  of a site chains to :data:`GENESIS_HASH`.
- ``signature`` is ed25519 over the 32 raw bytes of ``hash``, base64url without padding
  (86 characters), made with the key named by ``key_id``.

``audit/verify_export.py`` repeats these checks without Sill; keep the two in step.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nacl.exceptions
import nacl.signing
import rfc8785

from sill import jcs

GENESIS_HASH = "0" * 64
# JCS writes integers exactly only up to 2**53 - 1 (an IEEE double); amounts are minor units.
MAX_SAFE_INTEGER = 2**53 - 1
PAYLOAD_KEYS = frozenset({"site_id", "seq", "kind", "recorded_at", "body"})

_HASH_RE = re.compile(r"\A[0-9a-f]{64}\Z")
_SIGNATURE_RE = re.compile(r"\A[A-Za-z0-9_-]{86}\Z")
_LONG_DIGITS = re.compile(r"\d{16}")
_RECORDED_AT_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z\Z")


def canonical(obj: Any) -> bytes:
    """RFC 8785 bytes of ``obj``, which may hold only dict (str keys), list, str, int, bool
    and None.

    Raises ``TypeError`` for anything else, floats and ``Decimal`` included: amounts go in as
    integer minor units (or strings) so the log never rounds them. Raises ``ValueError`` for an
    integer JCS cannot write exactly (beyond ±(2**53 - 1)).
    """
    _check_value(obj, "$")
    # The C encoder's bytes when they are JCS's (sill.jcs; identical to rfc8785.dumps).
    return jcs.canonical(obj)


def _check_value(value: Any, path: str) -> None:
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"{path}: integer {value} is beyond 2**53 - 1; pass it as a string")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_value(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: object keys must be strings, not {type(key).__name__}")
            _check_value(item, f"{path}.{key}")
        return
    raise TypeError(
        f"{path}: {type(value).__name__} is not allowed in an audit payload "
        "(use int minor units or str; floats are never exact)"
    )


def record_hash(prev_hash: str, payload_bytes: bytes) -> str:
    return hashlib.sha256(prev_hash.encode("ascii") + payload_bytes).hexdigest()


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url: the alphabet only, padding optional, spare bits zero."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        raise ValueError("not base64url")
    stripped = text.rstrip("=")
    raw = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    if b64url_encode(raw) != stripped:
        raise ValueError("not the canonical base64url encoding")
    return raw


def sign_hash(hash_hex: str, signing_key: nacl.signing.SigningKey) -> str:
    """The record signature: ed25519 over ``bytes.fromhex(hash_hex)``, base64url, 86 chars."""
    return b64url_encode(signing_key.sign(bytes.fromhex(hash_hex)).signature)


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    count: int  # records that passed every check before the first failure (all, when ok)
    first_bad_seq: int | None
    problem: str  # "" when ok


class _Bad(Exception):
    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(problem)
        self.seq = seq
        self.problem = problem


def verify_chain(
    records: Iterable[Mapping[str, Any]],
    public_keys: Mapping[str, bytes],
    *,
    expected_head: tuple[int, str] | None = None,
    windows: Mapping[str, tuple[datetime | None, datetime | None]] | None = None,
) -> VerifyResult:
    """Check one site's records, in ``seq`` order, and stop at the first that fails.

    Checks for each record, in this order: ``seq`` is the previous seq + 1 (the first is 1);
    ``payload`` parses and re-canonicalises to the identical text; the payload's
    ``site_id``/``seq``/``kind`` equal the columns (and ``site_id`` is the chain's);
    ``prev_hash`` is the previous record's ``hash``; ``hash`` recomputes; ``signature``
    verifies with ``public_keys[key_id]`` (raw 32-byte ed25519 keys).

    ``first_bad_seq`` names the first record that fails. For a deleted record that is the
    record *after* the gap (the problem text names the missing seq); for two swapped records
    it is the lower of the two. A chain that merely ends early cannot be told from a shorter
    one: pass ``expected_head`` (the trusted last ``(seq, hash)``) to catch a truncated tail;
    its failure names the first missing seq.

    ``windows`` (key id → ``[valid_from, valid_until)``, None unbounded): a record whose
    ``recorded_at`` lies outside its key's window fails, even if the signature verifies. So
    does one signed by a key whose window starts before that of a key which signed an earlier
    record: ``recorded_at`` is the signer's own word, so without this a retired key could go
    on signing records it backdates into its window. Keys with no window at all (legacy)
    are outside this ordering.

    A record that carries the unsigned columns Sill keeps beside it fails unless they say what
    the payload says: ``created_at`` (an aware datetime) is its ``recorded_at``, and each of
    :data:`SUBJECT_COLUMNS` the id its body names.

    ``recorded_at`` never goes backwards along the chain (``append_record`` times a record at
    its predecessor's instant rather than before it): a record timed before the one it follows
    fails, at its own seq. Equal times pass (two records in one millisecond).
    """
    count = 0
    prev_seq = 0
    prev_hash = GENESIS_HASH
    site_id: str | None = None
    newest: _Signer | None = None
    prev_time: tuple[datetime, str] | None = None  # the previous record's, and as written
    try:
        for record in records:
            seq = record.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool):
                raise _Bad(prev_seq + 1, f"record after seq {prev_seq} has no integer seq")
            if seq != prev_seq + 1:
                if seq > prev_seq + 1:
                    missing = (
                        f"seq {prev_seq + 1}"
                        if seq == prev_seq + 2
                        else f"seqs {prev_seq + 1}..{seq - 1}"
                    )
                    raise _Bad(seq, f"expected seq {prev_seq + 1}, found {seq}: {missing} missing")
                raise _Bad(seq, f"expected seq {prev_seq + 1}, found {seq}: out of order")
            if site_id is None:
                site_id = record.get("site_id")
            time = _verify_record(
                record,
                seq=seq,
                site_id=site_id,
                prev_hash=prev_hash,
                keys=public_keys,
                windows=windows,
            )
            if windows is not None:
                newest = _check_key_order(seq, record.get("key_id"), windows, newest)
            prev_time = _check_time_order(seq, time, prev_time)
            prev_seq, prev_hash = seq, record["hash"]
            count += 1
        if expected_head is not None:
            head_seq, head_hash = expected_head
            if head_seq > prev_seq:
                raise _Bad(prev_seq + 1, f"chain ends at seq {prev_seq} but its head is {head_seq}")
            if head_seq < prev_seq:
                raise _Bad(head_seq + 1, f"records beyond the chain head (seq {head_seq})")
            if head_hash != prev_hash:
                raise _Bad(prev_seq, "last hash differs from the chain head")
    except _Bad as bad:
        return VerifyResult(ok=False, count=count, first_bad_seq=bad.seq, problem=bad.problem)
    return VerifyResult(ok=True, count=count, first_bad_seq=None, problem="")


# Columns Sill keeps beside each record so lookups by subject use an index; they are not
# hashed, so verification checks them against the (signed) body they were derived from.
SUBJECT_MAX_LENGTH = 40
SUBJECT_COLUMNS = (("subject_refund_id", "refund_id"), ("subject_order_id", "order_id"))


def subject_of(body: Mapping[str, Any], key: str) -> str:
    """The id ``body[key]`` names, for the record's subject columns; "" when there is none.

    Only a top-level string that fits the column counts (Sill's ids are 40 characters at
    most); anything else leaves the subject empty rather than storing a truncated id.
    """
    value = body.get(key)
    if isinstance(value, str) and 0 < len(value) <= SUBJECT_MAX_LENGTH:
        return value
    return ""


def _verify_record(
    record: Mapping[str, Any],
    *,
    seq: int,
    site_id: Any,
    prev_hash: str,
    keys: Mapping[str, bytes],
    windows: Mapping[str, tuple[datetime | None, datetime | None]] | None = None,
) -> tuple[datetime, str]:
    """Check one record; return its ``recorded_at``, parsed and as written."""
    text = record.get("payload")
    if not isinstance(text, str):
        raise _Bad(seq, "payload is not text")
    try:
        payload = _parse_fast(text)
        payload_bytes = text.encode("utf-8")
        if not is_canonical_text(payload, text):
            raise _Bad(seq, "payload is not in canonical form")
    except (ValueError, TypeError) as exc:
        raise _Bad(seq, f"payload is not canonical JSON: {exc}") from None
    except RecursionError:  # nested deeper than Python parses; append_record cannot write one
        raise _Bad(seq, "payload is nested too deeply to parse") from None
    if not isinstance(payload, dict) or set(payload) != PAYLOAD_KEYS:
        raise _Bad(seq, "payload keys are not site_id, seq, kind, recorded_at, body")
    try:  # as Sill writes it, whatever key signed it: the standalone verifier reads no other
        at = parse_recorded_at(payload["recorded_at"])
    except ValueError as exc:
        raise _Bad(seq, str(exc)) from None
    if record.get("site_id") != site_id:
        raise _Bad(seq, f"record belongs to site {record.get('site_id')}, not {site_id}")
    for field in ("site_id", "seq", "kind"):
        if payload[field] != record.get(field) or type(payload[field]) is not type(
            record.get(field)
        ):
            raise _Bad(seq, f"payload {field} {payload[field]!r} != record {record.get(field)!r}")
    if record.get("prev_hash") != prev_hash:
        raise _Bad(seq, "prev_hash is not the previous record's hash")
    digest = record.get("hash")
    if not isinstance(digest, str) or not _HASH_RE.match(digest):
        raise _Bad(seq, "hash is not 64 lowercase hex digits")
    if record_hash(prev_hash, payload_bytes) != digest:
        raise _Bad(seq, "hash does not match the payload")
    key_id: Any = record.get("key_id")  # any JSON value: only a known id finds a key
    key = keys.get(key_id)
    if key is None:
        raise _Bad(seq, f"unknown key_id {record.get('key_id')!r}")
    signature = record.get("signature")
    if not isinstance(signature, str) or not _SIGNATURE_RE.match(signature):
        raise _Bad(seq, "signature is not 86 base64url characters")
    try:
        _verify_key(key).verify(bytes.fromhex(digest), b64url_decode(signature))
    except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        raise _Bad(seq, "signature does not verify") from None
    if windows is not None and key_id in windows:
        _check_window(seq, key_id, payload.get("recorded_at"), windows[key_id])
    if "created_at" in record:
        _check_created_at(seq, record["created_at"], payload["recorded_at"])
    body = payload["body"] if isinstance(payload["body"], dict) else {}
    for column, body_key in SUBJECT_COLUMNS:
        if column in record and record[column] != subject_of(body, body_key):
            raise _Bad(seq, f"{column} {record[column]!r} does not match the signed body")
    return at, payload["recorded_at"]


def parse_recorded_at(text: Any) -> datetime:
    """A payload's ``recorded_at`` (``YYYY-MM-DDTHH:MM:SS.mmmZ``) as an aware datetime."""
    if not isinstance(text, str) or not _RECORDED_AT_RE.match(text):
        raise ValueError(f"recorded_at {text!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _check_window(
    seq: int, key_id: str, recorded_at: Any, window: tuple[datetime | None, datetime | None]
) -> None:
    try:
        at = parse_recorded_at(recorded_at)
    except ValueError as exc:
        raise _Bad(seq, str(exc)) from None
    valid_from, valid_until = window
    if (valid_from is not None and at < valid_from) or (
        valid_until is not None and at >= valid_until
    ):
        raise _Bad(seq, f"signed by key {key_id} at {recorded_at}, outside its validity window")


# The key whose window starts latest among those that signed a record so far: its window's
# start (None: from the beginning), its id and the first seq it signed.
_Signer = tuple[datetime | None, str, int]


def _check_key_order(
    seq: int,
    key_id: Any,
    windows: Mapping[str, tuple[datetime | None, datetime | None]],
    newest: _Signer | None,
) -> _Signer | None:
    """Refuse a record signed by a key that a later key had already succeeded in the chain;
    return the newest signer after this record."""
    window = windows.get(key_id) if isinstance(key_id, str) else None
    if window is None or window == (None, None):
        return newest  # a legacy key: no window, no place in the order
    start = window[0]
    if newest is None:
        return (start, key_id, seq)
    newest_start, newest_id, newest_seq = newest
    if newest_start is not None and (start is None or start < newest_start):
        raise _Bad(
            seq,
            f"signed by a retired key after its successor signed: {key_id}'s window starts "
            f"before that of {newest_id}, which signed seq {newest_seq}",
        )
    if start is not None and (newest_start is None or start > newest_start):
        return (start, key_id, seq)
    return newest


def _check_time_order(
    seq: int, time: tuple[datetime, str], prev: tuple[datetime, str] | None
) -> tuple[datetime, str]:
    """Refuse a record timed before the record it follows (``append_record`` never writes one,
    whichever host's clock is behind); return its time, parsed and as written, for the next."""
    if prev is not None and time[0] < prev[0]:
        raise _Bad(
            seq,
            f"recorded_at {time[1]} is before seq {seq - 1}'s {prev[1]}: the log's time went "
            "backwards",
        )
    return time


def _check_created_at(seq: int, created_at: Any, recorded_at: Any) -> None:
    # The column Activity shows, filters by date and downloads: moved, it would hide a record
    # from the days an auditor looks at while the signed payload still verifies.
    try:
        at = parse_recorded_at(recorded_at)
    except ValueError as exc:
        raise _Bad(seq, str(exc)) from None
    if created_at != at:
        raise _Bad(seq, f"created_at {created_at} is not the signed recorded_at {recorded_at}")


@functools.lru_cache(maxsize=64)
def _verify_key(raw: bytes) -> nacl.signing.VerifyKey:
    return nacl.signing.VerifyKey(raw)


def _refuse_number(token: str) -> Any:
    raise ValueError(f"number {token} is not an integer")


def _parse_fast(text: str) -> Any:
    # The C parser; duplicate keys need no hook here: a payload holding one re-serialises to
    # other text, so is_canonical_text refuses it.
    return json.loads(text, parse_float=_refuse_number, parse_constant=_refuse_number)


def is_canonical_text(value: Any, text: str) -> bool:
    """Whether ``text`` is the RFC 8785 form of ``value`` (parsed from it).

    For the values Sill writes (no floats), JCS is ``json.dumps`` with sorted keys, no spaces
    and no ASCII escaping, except that JCS sorts keys by UTF-16 code units where Python sorts by
    code points: the two differ only when keys mix astral characters with U+E000..U+FFFF. The
    C encoder answers first; only a mismatch pays for the pure-Python canonicaliser. This is
    what makes verification run near the speed of the signature checks. Raises
    ``ValueError`` for an integer beyond ±(2**53 - 1), which JCS cannot write exactly.
    """
    if json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) == text:
        # The C encoder writes any integer exactly; JCS only those an IEEE double holds. Sixteen
        # digits in a row is the first place one beyond 2**53 - 1 can hide (in a string too,
        # which then costs only the walk): Sill never writes one, a verifier in another language
        # would read another number than the one that was signed.
        if _LONG_DIGITS.search(text):
            _check_value(value, "$")
        return True
    _check_value(value, "$")
    return bool(rfc8785.dumps(value) == text.encode("utf-8"))


def parse_strict(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys, NaN/Infinity and floats (never written)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise ValueError(f"duplicate key {key!r}")
            result[key] = value
        return result

    def refuse(token: str) -> Any:
        raise ValueError(f"number {token} is not an integer")

    return json.loads(text, object_pairs_hook=pairs, parse_float=refuse, parse_constant=refuse)
