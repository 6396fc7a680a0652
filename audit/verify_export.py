#!/usr/bin/env python3
"""Verify Sill's audit evidence without Sill: Python 3.11+ standard library and PyNaCl only.

    python verify_export.py export.jsonl [--keys F] [--public-key KEY_ID=BASE64URL ...]
                                         [--checkpoint F]
    python verify_export.py bundle.json  [--keys F] [--public-key KEY_ID=BASE64URL ...]
                                         [--checkpoint F [--consistency F]] [--export F]

An export (``manage.py audit export --site S``) is JSON lines: a header
``{"type": "header", "format": "sill-audit-export-v1", "site_id", "origin", "public_keys",
"key_windows"}``, one ``{"type": "record", "site_id", "seq", "kind", "payload", "prev_hash",
"hash", "signature", "key_id"}`` per record in seq order, and last ``{"type": "checkpoint",
"note"}``: a signed checkpoint (c2sp.org/tlog-checkpoint) of exactly those records. For every
record this checks: seq is the previous + 1 (the first is 1); ``payload`` is canonical JSON
(RFC 8785) whose site_id/seq/kind equal the record's; ``prev_hash`` is the previous hash (64
zeros first); ``hash == sha256(prev_hash + payload)``; ``signature`` is ed25519 over the hash's
32 bytes by a known key, within that key's validity window; ``recorded_at`` is not before the
previous record's (Sill never times a record before the one it follows). Then the checkpoint:
signed by one of the keys for the log's origin, counting exactly the records in the file, its
root the RFC 6962 Merkle root of their leaves (``SHA-256(0x00 || payload)``); a time it carries
(a c2sp.org/tlog-cosignature line) inside its key's window and not before the last record's
``recorded_at``. A file without that last line, or with fewer records than it counts, was cut
short.

A bundle (``manage.py audit bundle --refund R``) is one refund's evidence: the mandate's bytes,
its records (decision, review, settlement, …) each with an inclusion proof, and a checkpoint;
each record and proof is checked, and the mandate's bytes against the SHA-256 its decision
record names (a bundle whose decision names a mandate must carry it); a record naming an
earlier one by its hash (``decision_hash``, ``escalated_hash``) needs that one in it too. An
agent purchase's bundle (``--order O``: ``order_id`` where a refund's has ``refund_id``) holds
its one decision, which must name the mandate, and its charge's records, each of which must
name that decision's hash: Sill decided on the signed mandate before it took the money. A
bundle's checkpoint is signed when it is made, so it is rarely the one an auditor kept: with
``--checkpoint`` of another size, pass ``--consistency`` the answer of ``GET /audit/<site
id>/proof/consistency?from=A&to=B`` between the two sizes (smaller first), which must show the
larger tree extends the smaller. A bundle cannot show it lists every record about its subject
(a later reversal left out, it still verifies): pass ``--export`` an export of its site, which
must verify and hash to the bundle's checkpoint, and hold no record about its subject the bundle
does not list (the kept checkpoint is then checked against the export: no ``--consistency``).

A record is also refused when it is signed by a key whose window starts before that of a key
which signed an earlier record ("signed by a retired key after its successor signed"): a
record's time is the signer's own word, and a retired key must not sign on by backdating.
Keys without a window (legacy) are outside this ordering. A window ends where the next key's
begins, whatever its ``valid_until`` says (an endorsement covers ``valid_from`` only). A
payload's ``recorded_at`` is ``YYYY-MM-DDTHH:MM:SS.mmmZ`` and its integers within ±(2**53 - 1)
(all RFC 8785 writes exactly), as Sill writes them and ``manage.py audit verify`` requires.

Keys in the file prove only that the file is consistent: pass the keys you trust with
``--public-key`` — Sill's configured key, the one that signs from the log's start — and a
checkpoint you kept yourself (fetched from ``/audit/<site id>/checkpoint`` earlier, or pushed
to you) with ``--checkpoint``: the file must then hold at least its records and hash to its
root, which catches a log rewritten or cut short before it was exported. With
``--public-key``, a key the file lists that you did not pin is used only if its window in
``key_windows`` carries an ``endorsement`` by a pinned key: ed25519 over
``sill-audit-key-endorsement-v1\\n<key id>\\n<base64url public key>\\n<valid_from, UTC,
YYYY-MM-DDTHH:MM:SS.mmmZ>\\n`` (a rotated key without a valid one is a problem; a key with no
window is simply not used).

The file's keys are its writer's word, windows included: someone holding a retired key can
drop its successor from the header and re-sign what came after, and nothing left in the file
says the key was retired. ``--keys FILE`` takes the keys and windows from Sill's keys file
instead (``/.well-known/sill-audit-keys.json``, fetched by the auditor): a key the file lists
and the keys file does not is a problem and its records are ``unknown key_id``; each window is
the published one, ending where the next published key in use begins; a rotated key is used
only on an endorsement, as in a header. With ``--public-key`` too, the pinned keys are the
roots (the keys file must list each as pinned; its other keys are used only on a pinned key's
endorsement, a key with no window only if pinned); without, the keys file's keys with no window
(its configured key, legacy keys) are the roots, on the word of the file as fetched.

Every problem is listed (``FAILED at …: problem``, one per line; exit 1); otherwise ``OK: N
records of log <origin> …`` and exit 0. A file that is not what its argument asks for (the file
neither an export nor a bundle, a ``--checkpoint`` that is no signed checkpoint or one of
another log, ``--keys`` that is no keys file, ``--export`` of another site, not UTF-8, missing)
is refused before anything is verified: ``WRONG INPUT: <argument>: <why>: nothing was
verified`` and exit 2. FAILED always means the evidence was checked and does not hold.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import nacl.exceptions
import nacl.signing

FORMAT = "sill-audit-export-v1"
GENESIS_HASH = "0" * 64
MAX_SAFE_INTEGER = 2**53 - 1
PAYLOAD_KEYS = {"site_id", "seq", "kind", "recorded_at", "body"}
ENDORSEMENT_CONTEXT = b"sill-audit-key-endorsement-v1\n"
HASH_RE = re.compile(r"\A[0-9a-f]{64}\Z")
SIGNATURE_RE = re.compile(r"\A[A-Za-z0-9_-]{86}\Z")
RECORDED_AT_RE = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z\Z")
LONG_DIGITS = re.compile(r"\d{16}")


class Failed(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"FAILED at {where}: {problem}")


# The exit code when a file is not what its argument asks for (no checkpoint, another log's,
# not an export, not UTF-8, missing): the auditor's input is wrong and nothing was verified,
# as argparse exits on a usage error. 1 (FAILED) means the evidence was checked and did not hold.
WRONG_INPUT = 2


class WrongInput(Exception):
    """``argument`` (``--checkpoint kept.txt``, or the file's own path) is not what it asks
    for: nothing is verified."""

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"WRONG INPUT: {argument}: {problem}: nothing was verified")


def read_input(path: str, argument: str, *, lines: bool = False) -> str:
    """The UTF-8 text of ``path``; :class:`WrongInput` if it cannot be read or is not text
    (``lines`` as for :func:`decode_input`)."""
    return decode_input(read_bytes(path, argument), argument, lines=lines)


def read_bytes(path: str, argument: str) -> bytes:
    """The bytes of ``path``, read once; :class:`WrongInput` if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise WrongInput(argument, f"cannot read it ({exc.strerror or exc})") from None


def decode_input(data: bytes, argument: str, *, lines: bool = False) -> str:
    """``data`` as UTF-8 text; :class:`WrongInput` if it is not text.

    ``lines``: an export, read line by line: a byte that is not UTF-8 is a problem of its line
    (:func:`parse_line`), unless it is in the first, which makes it no export."""
    if lines:
        first, _, _ = data.partition(b"\n")
        try:
            first.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WrongInput(argument, f"not UTF-8 text (byte {exc.start})") from None
        return data.decode("utf-8", errors="surrogateescape").replace("\r\n", "\n")
    try:
        # Lines end at "\n" (a "\r\n" too: JSON and notes hold no bare "\r"), as open() read them.
        return data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise WrongInput(argument, f"not UTF-8 text (byte {exc.start})") from None


def kept_checkpoint(text: str, argument: str, origin: Any, path: str) -> None:
    """Refuse (:class:`WrongInput`) a ``--checkpoint`` that is no well-formed signed checkpoint,
    or one of another log than the file at ``path`` (whose log is ``origin``). A well-formed
    checkpoint of that log whose signature fails is left to verification: a forgery, not a
    wrong file."""
    try:
        named, _, _ = checkpoint_shape(text)
    except ValueError as exc:
        problem = f"not a signed checkpoint ({exc}; cut short, or another file?)"
        raise WrongInput(argument, problem) from None
    if named != origin:
        problem = f"a checkpoint of log {named}, and {path} is of log {origin}: not the same log"
        raise WrongInput(argument, problem)


def jcs(value: Any) -> str:
    """RFC 8785 text for the values Sill writes: dict, list, str, int, bool, None (no floats).

    Keys sort by UTF-16 code units (big-endian UTF-16 bytes compare the same way); strings are
    escaped as ECMAScript's JSON.stringify does, which for these types is what ``json.dumps``
    with ``ensure_ascii=False`` writes.
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"integer {value} is beyond 2**53 - 1")
        return str(value)
    if isinstance(value, str):
        value.encode("utf-8")  # lone surrogates cannot be written
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(jcs(item) for item in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(jcs(k) + ":" + jcs(v) for k, v in items) + "}"
    raise TypeError(f"{type(value).__name__} is not written by Sill")


def parse_strict(text: str) -> Any:
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


def parse_line(line: str) -> Any:
    """One line of an export, parsed as :func:`parse_strict` parses a payload; ``ValueError``
    saying why it is none Sill writes.

    Strict because the verdict must not depend on the reader: with a key twice (a second
    ``payload`` or ``seq``) Python's last value verified while a first-wins reader shows the
    other, and NaN or Infinity are no JSON at all. A byte that was not UTF-8 arrives as a lone
    surrogate (:func:`read_input` reads an export with ``surrogateescape``)."""
    if any("\udc80" <= c <= "\udcff" for c in line):
        raise ValueError("not UTF-8 text")
    try:
        return parse_strict(line)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
    except ValueError as exc:
        raise ValueError(f"not JSON as Sill writes it ({exc})") from None


def b64url_decode(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise ValueError("not base64url without padding")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != text:
        raise ValueError("not the canonical base64url encoding")
    return raw


def load_key(text: str) -> nacl.signing.VerifyKey:
    try:
        return nacl.signing.VerifyKey(b64url_decode(text.rstrip("=")))
    except (ValueError, TypeError, nacl.exceptions.ValueError, nacl.exceptions.TypeError):
        raise ValueError("not a base64url 32-byte ed25519 public key") from None


def check_record(
    rec: dict[str, Any], *, seq: int, site_id: Any, prev_hash: str, keys: dict[str, Any]
) -> str:
    """Check one record (already known to have ``seq``); return its hash.

    ``site_id`` is the header's, as written (any JSON value): records must repeat it exactly.
    """
    text = rec.get("payload")
    if not isinstance(text, str):
        raise Failed(f"seq {seq}", "payload is not text")
    try:
        payload = parse_strict(text)
        # The C encoder writes JCS for these values unless keys mix astral characters with
        # U+E000..U+FFFF (JCS sorts by UTF-16 units): only a mismatch pays for jcs().
        fast = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        # json.dumps writes any integer exactly, JCS only up to 2**53 - 1: sixteen digits in a
        # row (in a string too) is where a larger one could hide, so jcs() judges those.
        canonical = text if fast == text and not LONG_DIGITS.search(text) else jcs(payload)
    except (ValueError, TypeError) as exc:
        raise Failed(f"seq {seq}", f"payload is not canonical JSON: {exc}") from None
    except RecursionError:  # nested deeper than Python parses; Sill never writes one
        raise Failed(f"seq {seq}", "payload is nested too deeply to parse") from None
    if canonical != text:
        raise Failed(f"seq {seq}", "payload is not in canonical form")
    if not isinstance(payload, dict) or set(payload) != PAYLOAD_KEYS:
        raise Failed(
            f"seq {seq}", "payload does not have exactly site_id, seq, kind, recorded_at, body"
        )
    recorded_at = payload["recorded_at"]
    if not isinstance(recorded_at, str) or not RECORDED_AT_RE.match(recorded_at):
        raise Failed(f"seq {seq}", f"recorded_at {recorded_at!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ")
    if rec.get("site_id") != site_id:
        raise Failed(f"seq {seq}", f"record belongs to site {rec.get('site_id')}, not {site_id}")
    for field in ("site_id", "seq", "kind"):
        mine, theirs = payload[field], rec.get(field)
        if mine != theirs or type(mine) is not type(theirs):
            raise Failed(f"seq {seq}", f"payload {field} {mine!r} != record {theirs!r}")
    claimed = rec.get("prev_hash")
    # Its form first: a bundle expects each record's own prev_hash, an export the previous
    # record's claimed hash, so both sides may be anything an editor wrote (hashing needs ASCII).
    if not isinstance(claimed, str) or not HASH_RE.match(claimed):
        raise Failed(f"seq {seq}", "prev_hash is not 64 lowercase hex digits")
    if claimed != prev_hash:
        raise Failed(f"seq {seq}", "prev_hash is not the previous record's hash")
    digest = rec.get("hash")
    if not isinstance(digest, str) or not HASH_RE.match(digest):
        raise Failed(f"seq {seq}", "hash is not 64 lowercase hex digits")
    if hashlib.sha256(prev_hash.encode("ascii") + text.encode("utf-8")).hexdigest() != digest:
        raise Failed(f"seq {seq}", "hash does not match the payload")
    key_id: Any = rec.get("key_id")  # any JSON value: only a known id finds a key
    # A list or object is unhashable: it names no key (and must not crash the verifier).
    key = keys.get(key_id) if isinstance(key_id, str) else None
    if key is None:
        raise Failed(f"seq {seq}", f"unknown key_id {rec.get('key_id')!r}")
    signature = rec.get("signature")
    if not isinstance(signature, str) or not SIGNATURE_RE.match(signature):
        raise Failed(f"seq {seq}", "signature is not 86 base64url characters")
    try:
        key.verify(bytes.fromhex(digest), b64url_decode(signature))
    except (ValueError, nacl.exceptions.BadSignatureError):
        raise Failed(f"seq {seq}", "signature does not verify") from None
    return digest


# -- Merkle proofs (RFC 9162 §2.1.3.2 and §2.1.4.2, as the RFC writes them; Sill's own
# audit/merkle.py follows transparency-dev's decomposition instead: two implementations). ---


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _are_hashes(*values: Any) -> bool:
    return all(isinstance(v, bytes) and len(v) == 32 for v in values)


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> None:
    """Raise ``ValueError`` unless ``proof`` puts ``leaf`` at ``index`` of the tree of
    ``size`` leaves with ``root``."""
    if not _are_hashes(leaf, root, *proof):
        raise ValueError("hashes must be 32 bytes")
    if not 0 <= index < size:
        raise ValueError(f"index {index} is not below size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ValueError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = _node(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ValueError("the inclusion proof is too short")
    if r != root:
        raise ValueError("the inclusion proof leads to another root")


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> None:
    """Raise ``ValueError`` unless ``proof`` shows the tree of ``first`` leaves with
    ``first_root`` is a prefix of the tree of ``second`` leaves with ``second_root``."""
    if first > second:
        raise ValueError(f"size {first} is beyond size {second}")
    if first == 0:
        raise ValueError("a consistency proof from the empty tree proves nothing")
    if first == second:
        if proof or first_root != second_root:
            raise ValueError("equal sizes need an empty proof and equal roots")
        return
    if not proof or not _are_hashes(first_root, second_root, *proof):
        raise ValueError("the proof and roots must be 32-byte hashes")
    path = list(proof)
    if first & (first - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ValueError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = _node(c, fr), _node(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = _node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ValueError("the consistency proof is too short")
    if fr != first_root or sr != second_root:
        raise ValueError("the consistency proof does not lead to both roots")


# -- signed notes and checkpoints (c2sp.org/signed-note, c2sp.org/tlog-checkpoint) ------


def _note_key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n\x01" + public_key).digest()[:4]


def split_note(note: Any) -> tuple[str, list[tuple[str, bytes]]]:
    """``(text, [(key name, signature bytes)])`` of a well-formed signed note, whoever signed
    it; ``ValueError`` naming what is malformed. Checks no signature."""
    if not isinstance(note, str) or not note.endswith("\n") or "\n\n" not in note:
        raise ValueError("not a signed note")
    split = note.rfind("\n\n")
    text, lines = note[: split + 1], note[split + 2 : -1].split("\n")
    # c2sp.org/signed-note: no control characters anywhere in a note (signature lines too),
    # and key names non-empty, without Unicode spaces or '+'; a line breaking them is malformed
    # (as in sumdb/note's Open), not someone else's signature to skip.
    if any(ord(c) < 0x20 and c != "\n" for c in note):
        raise ValueError("the note holds control characters")
    signatures = []
    for line in lines[:16]:
        if not line.startswith("\u2014 "):
            raise ValueError("a signature line starts with an em dash")
        name, _, encoded = line[2:].partition(" ")
        if not name or "+" in name or any(c.isspace() for c in name):
            raise ValueError("a signature line is malformed: its key name is not valid")
        try:
            blob = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise ValueError("a signature is not base64") from None
        if len(blob) < 5:
            raise ValueError("a signature line is malformed: the signature is too short")
        signatures.append((name, blob))
    return text, signatures


def checkpoint_shape(note: Any) -> tuple[str, int, bytes]:
    """``(origin, tree size, root)`` a signed checkpoint states, read before any signature is
    checked; ``ValueError`` unless ``note`` is a well-formed one (of any log, signed by anyone).
    """
    text, _ = split_note(note)
    parts = text.split("\n")
    if len(parts) < 4 or not parts[0]:
        raise ValueError("the checkpoint has no origin, tree size and root hash lines")
    # c2sp.org/tlog-checkpoint: the size in ASCII decimal with no leading zeroes; any lines
    # after the root hash (extension lines) non-empty.
    size = parts[1]
    if not (size.isascii() and size.isdigit()) or (size != "0" and size.startswith("0")):
        raise ValueError("the checkpoint's tree size is not a decimal number")
    if any(not line for line in parts[3:-1]):
        raise ValueError("the checkpoint has an empty extension line")
    try:
        root = base64.b64decode(parts[2], validate=True)
    except ValueError:
        raise ValueError("the checkpoint's root is not base64") from None
    if len(root) != 32:
        raise ValueError("the checkpoint's root is not 32 bytes")
    return parts[0], int(size), root


def _cosignature_key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n\x04" + public_key).digest()[:4]


def checkpoint_times(note: str, *, origin: str, keys: dict[str, Any]) -> list[tuple[str, int]]:
    """``(key id, time)`` for each c2sp.org/tlog-cosignature v1 line of one of ``keys`` on the
    checkpoint ``note``: ``cosignature/v1\\ntime <t>\\n`` + the text, signed with the key's
    time (POSIX seconds, 8 bytes, big-endian) after the 4-byte key id. Empty when it has none
    (Sill timed no checkpoint before); ``ValueError`` when one by a known key does not verify."""
    text, signatures = split_note(note)
    found = []
    for name, blob in signatures:
        if name != origin:
            continue
        for key_id, key in keys.items():
            if blob[:4] != _cosignature_key_id(origin, bytes(key)):
                continue
            timestamp = int.from_bytes(blob[4:12], "big")
            message = f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode("utf-8")
            try:
                if len(blob) != 76 or timestamp > 2**63 - 1:
                    raise ValueError("not a cosignature/v1")
                key.verify(message, blob[12:])
            except (nacl.exceptions.BadSignatureError, ValueError):
                raise ValueError("the checkpoint's timed signature does not verify") from None
            found.append((key_id, timestamp))
    return found


def checkpoint_time(note: str, *, origin: str, keys: dict[str, Any]) -> int | None:
    """When one of ``keys`` signed the checkpoint ``note`` (POSIX seconds; the latest, if
    several did): :func:`checkpoint_times`. None when it carries no signed time."""
    times = checkpoint_times(note, origin=origin, keys=keys)
    return max(timestamp for _, timestamp in times) if times else None


def time_problems(
    note: Any,
    what: str,
    origin: str,
    keys: dict[str, Any],
    windows: dict[str, tuple[Any, Any]],
    counted: list[tuple[datetime, str, int]],
) -> list[str]:
    """Problems with the times ``keys`` signed the checkpoint ``note`` at (none for one that
    carries no time; one whose timed line does not verify is reported with the checkpoint).

    A time is its key's word, so it is held to what the file shows: it lies in the key's window
    (else a retired key signs checkpoints timed whenever it likes), and it is not before any
    record the checkpoint counts (``counted``: ``(recorded_at, as written, seq)`` of those the
    file shows are in it). Whole seconds, rounded down from when it was signed: a checkpoint
    signed in the second its key's window began, or a record was made, reads as that second."""
    try:
        times = checkpoint_times(note, origin=origin, keys=keys)
    except ValueError:
        return []
    newest = max(counted, default=None)
    problems = []
    for key_id, timestamp in times:
        when = utc_seconds(timestamp)
        start, end = windows.get(key_id, (None, None))
        if (start is not None and timestamp < math.floor(start.timestamp())) or (
            end is not None and timestamp >= end.timestamp()
        ):
            problems.append(f"FAILED at {what}: signed by {key_id} at {when}, outside its window")
        elif newest is not None and timestamp < math.floor(newest[0].timestamp()):
            problems.append(
                f"FAILED at {what}: signed at {when}, before seq {newest[2]}'s recorded_at "
                f"{newest[1]}, which it counts"
            )
    return problems


def open_checkpoint(note: str, *, origin: str, keys: dict[str, Any]) -> tuple[int, bytes]:
    """``(tree size, root)`` of a checkpoint of log ``origin`` signed by one of ``keys`` (and
    whose timed signatures by them, if any, verify)."""
    text, signatures = split_note(note)
    verified = False
    for name, blob in signatures:
        if name != origin:
            continue
        for key in keys.values():
            if blob[:4] != _note_key_id(origin, bytes(key)):
                continue
            try:
                key.verify(text.encode("utf-8"), blob[4:])
            except (nacl.exceptions.BadSignatureError, ValueError):
                raise ValueError("the checkpoint's signature does not verify") from None
            verified = True
    if not verified:
        raise ValueError(f"the checkpoint is not signed by a known key for {origin}")
    checkpoint_time(note, origin=origin, keys=keys)
    named, size, root = checkpoint_shape(note)
    if named != origin:
        raise ValueError(f"the checkpoint is not of log {origin}")
    return size, root


def merkle_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1: the root over leaf hashes (split at the largest power of two below n)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return _node(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def leaf_of(payload: str) -> bytes:
    return hashlib.sha256(b"\x00" + payload.encode("utf-8")).digest()


# -- keys and their windows ---------------------------------------------------------------


def keys_for(
    doc: dict[str, Any], trusted: dict[str, Any] | None, published: Any = None
) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]], list[str]]:
    """``(keys, windows, problems)`` that ``doc`` (an export's header, or a bundle) is checked
    against: the keys records and checkpoints may be signed by, and each key's window.

    Without ``published``, the keys and windows ``doc`` lists (:func:`header_keys`). With it
    (the keys file Sill publishes at ``/.well-known/sill-audit-keys.json``, fetched by the
    auditor), the keys and windows the keys file lists, whatever ``doc`` says: a file holds
    what its writer chose to list, so someone holding a retired key can drop its successor
    from the header and leave nothing saying the key was retired. A key ``doc`` lists that the
    keys file does not (or lists with another public key) is a problem, and records it signed
    are refused as ``unknown key_id``. The roots are the pinned keys (``trusted``), each of
    which the keys file must list as it was pinned; unpinned, the keys the file lists without
    a window (its configured key, and legacy keys) are taken on the file's word, as fetched.
    Either way a rotated key (one with a ``valid_from``) is used only on a root's endorsement,
    as in a header, and each window ends where the next key in use begins.
    """
    listed, stated = doc.get("public_keys"), doc.get("key_windows")
    # Sill lists both, always: a header without them (or with a key that is not text) is not
    # one of its exports, whichever keys the verifier then takes (a pinned key ignored them).
    if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
        raise Failed("the header", "public_keys is not an object of key ids and public keys")
    if not isinstance(stated, dict) or not all(isinstance(v, dict) for v in stated.values()):
        raise Failed("the header", "key_windows is not an object of key ids and windows")
    if published is None:
        keys, problems = header_keys(doc, trusted)
        windows = header_windows(doc)
        if trusted is not None:
            windows = ended_by_endorsements(doc, windows, keys, trusted)
        return keys, bound_windows(windows, keys), problems
    listing = keys_file_listing(published)
    windows = header_windows(listing, where="the keys file")
    problems = []
    if trusted is None:
        roots = {
            key_id: load_key(listing["public_keys"][key_id])
            for key_id, (start, _) in windows.items()
            if start is None
        }
        anchors = "the keys file's configured key"
    else:
        roots, anchors = trusted, "a key you pinned"
        for key_id, key in trusted.items():
            text = listing["public_keys"].get(key_id)
            if text is None:
                problems.append(
                    f"FAILED at the keys file: it does not list the key you pinned, {key_id}"
                )
            elif bytes(load_key(text)) != bytes(key):
                problems.append(
                    f"FAILED at the keys file: it lists another public key as {key_id} than "
                    "the one you pinned"
                )
    keys, endorsements = header_keys(listing, roots, where="the keys file", anchors=anchors)
    problems += endorsements
    windows = ended_by_endorsements(listing, windows, keys, roots)
    listed = doc.get("public_keys")
    for key_id, text in (listed if isinstance(listed, dict) else {}).items():
        if key_id not in listing["public_keys"]:
            problems.append(
                f"FAILED at the header: key {key_id} is not in the keys file: the records it "
                "signed are refused (fetch the keys file again if the export is newer)"
            )
        elif text != listing["public_keys"][key_id]:
            problems.append(
                f"FAILED at the header: key {key_id} is not the public key the keys file lists "
                "under that id: the keys file's is used"
            )
    return keys, bound_windows(windows, keys), problems


def keys_file_listing(published: Any) -> dict[str, Any]:
    """The keys file (``{"keys": [{"key_id", "algorithm", "public_key", "valid_from",
    "valid_until"}, …], "origin_prefix"}``, a rotated key also ``"endorsement"`` and
    ``"endorsed_by"``) as a header lists keys: ``public_keys`` and ``key_windows``.
    Raises :class:`Failed` unless it is that shape."""
    entries = published.get("keys") if isinstance(published, dict) else None
    if not isinstance(entries, list) or not entries:
        raise Failed(
            "the keys file", "no list of keys: not the answer of /.well-known/sill-audit-keys.json"
        )
    public_keys: dict[str, str] = {}
    key_windows: dict[str, dict[str, Any]] = {}
    for entry in entries:
        key_id = entry.get("key_id") if isinstance(entry, dict) else None
        if not isinstance(key_id, str) or not key_id:
            raise Failed("the keys file", "a key without a key_id")
        assert isinstance(entry, dict)
        if key_id in public_keys:
            raise Failed("the keys file", f"key {key_id} is listed twice")
        algorithm = entry.get("algorithm")
        if algorithm != "Ed25519":
            raise Failed("the keys file", f"key {key_id}: algorithm {algorithm!r} is not Ed25519")
        public_key = entry.get("public_key")
        try:
            load_key(public_key if isinstance(public_key, str) else "")
        except ValueError as exc:
            raise Failed("the keys file", f"key {key_id}: public_key is {exc}") from None
        public_keys[key_id] = str(public_key)
        key_windows[key_id] = {
            field: entry[field]
            for field in ("valid_from", "valid_until", "endorsement", "endorsed_by")
            if field in entry
        }
    return {"public_keys": public_keys, "key_windows": key_windows}


def header_keys(
    header: dict[str, Any],
    trusted: dict[str, Any] | None,
    *,
    where: str = "the header",
    anchors: str = "a key you pinned",
) -> tuple[dict[str, Any], list[str]]:
    """``(keys, problems)``: the keys records and checkpoints may be signed by.

    Unpinned (``trusted`` None): every key the header lists. Pinned: the pinned keys, and each
    key the header gives a window from a ``valid_from`` whose ``endorsement`` a pinned key
    signed; a windowed key without one is a problem (and not used). (:func:`keys_for` reads a
    keys file this way too: ``where`` and ``anchors`` name the file and its roots.)
    """
    listed = header.get("public_keys")
    if trusted is None:
        try:
            return {k: load_key(v) for k, v in dict(listed or {}).items()}, []
        except (ValueError, TypeError, AttributeError) as exc:
            raise Failed(where, f"bad public_keys: {exc}") from None
    keys = dict(trusted)
    problems = []
    listed = listed if isinstance(listed, dict) else {}
    windows = header.get("key_windows")
    for key_id, window in (windows if isinstance(windows, dict) else {}).items():
        if key_id in trusted or not isinstance(window, dict):
            continue
        try:
            valid_from = _time(window.get("valid_from"))
        except ValueError:
            valid_from = None  # header_windows reports it
        if valid_from is None:
            continue  # no window (a legacy key): used only if pinned
        problem = _endorsement_problem(key_id, listed, valid_from, window, trusted, anchors)
        if problem:
            problems.append(f"FAILED at {where}: key {key_id}: {problem}")
        else:
            keys[key_id] = load_key(listed[key_id])
    return keys, problems


def endorsement_statement(key_id: str, public_key: bytes, valid_from: datetime) -> bytes:
    at = valid_from.astimezone(UTC)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
    encoded = base64.urlsafe_b64encode(public_key).rstrip(b"=").decode("ascii")
    return ENDORSEMENT_CONTEXT + f"{key_id}\n{encoded}\n{stamp}\n".encode()


def _endorsement_problem(
    key_id: str,
    listed: dict[str, Any],
    valid_from: datetime,
    window: dict[str, Any],
    trusted: dict[str, Any],
    anchors: str,
) -> str:
    """Why no trusted key (``anchors`` names them) vouches for ``key_id``'s window ("" when
    one does)."""
    try:
        public_key = bytes(load_key(listed[key_id]))
    except (KeyError, ValueError, TypeError, AttributeError):
        return "no valid public key in public_keys"
    endorsement = window.get("endorsement")
    if not isinstance(endorsement, str) or not SIGNATURE_RE.match(endorsement):
        return f"its window carries no endorsement by {anchors}: its records are refused"
    statement = endorsement_statement(key_id, public_key, valid_from)
    for anchor in trusted.values():
        try:
            anchor.verify(statement, b64url_decode(endorsement))
        except (ValueError, nacl.exceptions.BadSignatureError):
            continue
        return ""
    return f"its endorsement does not verify under {anchors}: its records are refused"


def ended_by_endorsements(
    header: dict[str, Any],
    windows: dict[str, tuple[Any, Any]],
    keys: dict[str, Any],
    roots: dict[str, Any],
) -> dict[str, tuple[Any, Any]]:
    """``windows`` with each root's ending where the first key it endorsed begins: a root
    signs until the first rotation, whatever the file says of its own window (nobody signed
    that). Without this, a file that dropped the pinned key's window, or left it unbounded,
    made it a legacy key, valid for ever: whoever holds the configured key (it stays configured,
    to endorse) re-signed its successors' records and the verifier passed them."""
    listed = header.get("public_keys")
    listed = listed if isinstance(listed, dict) else {}
    stated = header.get("key_windows")
    stated = stated if isinstance(stated, dict) else {}
    ended = dict(windows)
    for root_id, root in roots.items():
        starts = [
            start
            for key_id, (start, _) in windows.items()
            if key_id in keys
            and key_id not in roots
            and start is not None
            and isinstance(stated.get(key_id), dict)
            and not _endorsement_problem(
                key_id, listed, start, stated[key_id], {root_id: root}, "the root"
            )
        ]
        if starts:
            start, end = ended.get(root_id, (None, None))
            ended[root_id] = (start, min(starts) if end is None else min(end, *starts))
    return ended


def header_windows(
    header: dict[str, Any], *, where: str = "the header"
) -> dict[str, tuple[Any, Any]]:
    windows = {}
    listed = header.get("key_windows")
    for key_id, window in (listed if isinstance(listed, dict) else {}).items():
        try:
            windows[key_id] = (_time(window.get("valid_from")), _time(window.get("valid_until")))
        except (AttributeError, ValueError):
            raise Failed(where, f"bad key_windows for {key_id!r}") from None
    return windows


def bound_windows(
    windows: dict[str, tuple[Any, Any]], keys: dict[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """``windows`` with each key's ending where the next key in use begins.

    A header's ``valid_until`` is nobody's signed word (an endorsement covers ``valid_from``
    only), and Sill ends every window at the next key's start: cleared in the file, it let a
    retired key sign records timed after its successor took over, so long as none of them
    followed one its successor signed. Keys without any window (legacy) stay unbounded.
    """
    starts = sorted(w[0] for k, w in windows.items() if k in keys and w[0] is not None)
    bounded = {}
    for key_id, (start, end) in windows.items():
        if start is not None or end is not None:
            later = [s for s in starts if start is None or s > start]
            if later and (end is None or later[0] < end):
                end = later[0]
        bounded[key_id] = (start, end)
    return bounded


def _time(text: Any) -> datetime | None:
    if text is None:
        return None
    at = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError("a time without a zone")
    return at


def check_window(rec: dict[str, Any], seq: int, windows: dict[str, tuple[Any, Any]]) -> None:
    key_id = rec.get("key_id")
    if not isinstance(key_id, str) or key_id not in windows:
        return
    recorded_at = json.loads(rec["payload"]).get("recorded_at")
    try:
        at = _time(recorded_at)
    except ValueError:
        raise Failed(f"seq {seq}", f"recorded_at {recorded_at!r} is not a time") from None
    start, end = windows[key_id]
    if at is None or (start is not None and at < start) or (end is not None and at >= end):
        raise Failed(f"seq {seq}", f"signed by {key_id} at {recorded_at}, outside its window")


class KeyOrder:
    """Records must not be signed by a key retired by one that already signed (checked in seq
    order; keys without any window are outside the order)."""

    def __init__(self, windows: dict[str, tuple[Any, Any]]) -> None:
        self.windows = windows
        self.newest: tuple[Any, str, int] | None = None  # (window start, key id, its seq)

    def check(self, rec: dict[str, Any], seq: int) -> None:
        key_id = rec.get("key_id")
        if not isinstance(key_id, str):
            return
        window = self.windows.get(key_id)
        if window is None or window == (None, None):
            return
        start = window[0]
        if self.newest is None:
            self.newest = (start, key_id, seq)
            return
        newest_start, newest_id, newest_seq = self.newest
        if newest_start is not None and (start is None or start < newest_start):
            raise Failed(
                f"seq {seq}",
                f"signed by a retired key after its successor signed: {key_id}'s window starts "
                f"before that of {newest_id}, which signed seq {newest_seq}",
            )
        if start is not None and (newest_start is None or start > newest_start):
            self.newest = (start, key_id, seq)


class TimeOrder:
    """A record's ``recorded_at`` never goes back before that of the record it follows (checked
    in seq order, for records that verified): Sill times a record at its predecessor's instant
    rather than before it, whichever of its hosts' clocks is behind, so an earlier time was
    written by something other than Sill's append. Equal times pass (one millisecond)."""

    def __init__(self) -> None:
        self.last: tuple[datetime, str, int] | None = None  # (time, as written, its seq)

    def check(self, rec: dict[str, Any], seq: int) -> None:
        stamp = json.loads(rec["payload"])["recorded_at"]  # its form checked with the record
        at = _time(stamp)
        assert at is not None
        if self.last is not None and at < self.last[0]:
            raise Failed(
                f"seq {seq}",
                f"recorded_at {stamp} is before seq {self.last[2]}'s {self.last[1]}: the log's "
                "time went backwards",
            )
        self.last = (at, stamp, seq)


# -- an export ----------------------------------------------------------------------------


def verify_export(
    lines: list[str],
    trusted: dict[str, Any] | None,
    trusted_checkpoint: str | None,
    *,
    published: Any = None,
    signed_at: dict[str, int | None] | None = None,
) -> tuple[int, list[str]]:
    """``(records, problems)`` for an export's lines; every problem found, in file order.
    ``published``: the keys file the auditor fetched (:func:`keys_for`). ``signed_at``, when
    given, is told when each checkpoint that verified was signed (:func:`checkpoint_time`), by
    what it is: ``"the export's checkpoint"``, ``"the trusted checkpoint"``."""
    try:
        header = parse_line(lines[0]) if lines else None
    except ValueError as exc:
        return 0, [f"FAILED at line 1: {exc}"]
    if not isinstance(header, dict) or header.get("type") != "header":
        return 0, ["FAILED at line 1: no header"]
    if header.get("format") != FORMAT:
        return 0, [f"FAILED at line 1: unknown format {header.get('format')!r}"]
    try:
        keys, windows, problems = keys_for(header, trusted, published)
    except Failed as failed:
        return 0, [str(failed)]
    order, times = KeyOrder(windows), TimeOrder()
    site_id = header.get("site_id")
    origin = header.get("origin") or ""
    prev_seq, prev_hash, leaves = 0, GENESIS_HASH, []
    # The times of the records that verified, in file order: what a checkpoint's time must follow.
    counted: list[tuple[datetime, str, int]] = []
    embedded: str | None = None
    after_checkpoint = False
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            rec = parse_line(line)
        except ValueError as exc:
            problems.append(f"FAILED at line {lineno}: {exc}")
            continue
        kind = rec.get("type") if isinstance(rec, dict) else None
        if kind == "checkpoint":
            if after_checkpoint:
                # Which one counts would be the reader's choice: Sill writes one, last.
                problems.append(f"FAILED at line {lineno}: a second checkpoint line")
                continue
            embedded = rec.get("note")
            after_checkpoint = True
            continue
        if kind != "record":
            problems.append(f"FAILED at line {lineno}: not a record")
            continue
        if after_checkpoint:
            problems.append(f"FAILED at line {lineno}: a record after the checkpoint line")
        seq = rec.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            problems.append(f"FAILED at line {lineno}: no integer seq")
            continue
        if seq != prev_seq + 1:
            if seq > prev_seq + 1:
                gap = (
                    f"seq {prev_seq + 1}"
                    if seq == prev_seq + 2
                    else f"seqs {prev_seq + 1}..{seq - 1}"
                )
                problems.append(
                    f"FAILED at seq {seq}: expected seq {prev_seq + 1}, found {seq}: {gap} missing"
                )
            else:
                problems.append(
                    f"FAILED at seq {seq}: expected seq {prev_seq + 1}, found {seq}: out of order"
                )
        try:
            check_record(rec, seq=seq, site_id=site_id, prev_hash=prev_hash, keys=keys)
            check_window(rec, seq, windows)
            order.check(rec, seq)
            times.check(rec, seq)
        except Failed as failed:
            problems.append(str(failed))
        else:
            assert times.last is not None
            counted.append(times.last)
        # Go on from what this record claims, so one bad record is one problem, not a cascade.
        prev_seq = seq
        prev_hash = rec.get("hash") if isinstance(rec.get("hash"), str) else prev_hash
        payload = rec.get("payload")
        leaves.append(leaf_of(payload) if isinstance(payload, str) else b"")
    count = len(leaves)
    if embedded is None:
        problems.append(
            f"FAILED at the end: no signed checkpoint after record {prev_seq}: the export was "
            "cut short (or comes from a Sill without checkpoints)"
        )
    else:
        what = "the export's checkpoint"
        problems += _against(embedded, what, origin, keys, leaves, exact=True)
        problems += time_problems(embedded, what, origin, keys, windows, counted)
        _time_of(embedded, what, origin, keys, signed_at)
    if trusted_checkpoint is not None:
        what = "the trusted checkpoint"
        problems += _against(trusted_checkpoint, what, origin, keys, leaves, exact=False)
        try:
            size = checkpoint_shape(trusted_checkpoint)[1]
        except ValueError:
            size = 0  # reported above: no checkpoint
        in_it = [time for time in counted if time[2] <= size]
        problems += time_problems(trusted_checkpoint, what, origin, keys, windows, in_it)
        _time_of(trusted_checkpoint, what, origin, keys, signed_at)
    return count, problems


def _time_of(
    note: Any, what: str, origin: str, keys: dict[str, Any], signed_at: dict[str, Any] | None
) -> None:
    if signed_at is not None:
        with contextlib.suppress(ValueError):  # reported with the checkpoint
            signed_at[what] = checkpoint_time(note, origin=origin, keys=keys)


def _against(
    note: str, what: str, origin: str, keys: dict[str, Any], leaves: list[bytes], *, exact: bool
) -> list[str]:
    try:
        size, root = open_checkpoint(note, origin=origin, keys=keys)
    except ValueError as exc:
        return [f"FAILED at {what}: {exc}"]
    if size > len(leaves):
        return [
            f"FAILED at {what}: it counts {size} records, the file holds {len(leaves)}: "
            "records were removed from the end"
        ]
    if exact and size != len(leaves):
        return [f"FAILED at {what}: it counts {size} records, the file holds {len(leaves)}"]
    if merkle_root(leaves[:size]) != root:
        return [
            f"FAILED at {what}: the first {size} records do not hash to its root: records "
            "were changed, inserted, removed or reordered"
        ]
    return []


# -- a bundle -----------------------------------------------------------------------------

BUNDLE_FORMAT = "sill-evidence-bundle-v1"
# Hashes a record's body may name of earlier records about the same refund, and what each is.
LINKS = (
    ("decision_hash", "the decision it follows from"),
    ("escalated_hash", "the escalation it decides"),
)
# A purchase's bundle: its decision on the agent's mandate, then its charge's records, each
# naming that decision by ``decision_hash`` (a refund of the order has a bundle of its own).
PURCHASE_DECISIONS = ("approved", "rejected")
CHARGE_KINDS = ("charge", "needs_attention", "lease_lost", "attention_resolved")


def bundle_subject(bundle: dict[str, Any]) -> tuple[str, Any]:
    """``(field, id)`` of what the bundle is the evidence of: ``("refund_id", R)`` or, for an
    agent's purchase, ``("order_id", O)``; its records name it by that field. ``("", None)``
    when it names neither, or both, or names no id (null, or not a non-empty string): a
    record about no refund (a policy change, a member added) names none either, so a bundle
    of ``"refund_id": null`` verified as the evidence of "refund None"."""
    named = [field for field in ("refund_id", "order_id") if field in bundle]
    if len(named) != 1 or not isinstance(bundle[named[0]], str) or not bundle[named[0]]:
        return "", None
    return named[0], bundle[named[0]]


def subject_label(field: str, subject: Any) -> str:
    return f"refund {subject}" if field == "refund_id" else f"the purchase of order {subject}"


def about_subject(field: str, subject: Any, kind: Any, body: Any) -> bool:
    """Whether a record of ``kind`` with ``body`` is about the bundle's subject: a refund's
    records name it; a purchase's name its order, no refund, and are its decision or charge."""
    if not isinstance(body, dict) or body.get(field) != subject:
        return False
    return field == "refund_id" or (
        body.get("refund_id") is None and kind in PURCHASE_DECISIONS + CHARGE_KINDS
    )


def verify_bundle(
    bundle: dict[str, Any],
    trusted: dict[str, Any] | None,
    trusted_checkpoint: str | None,
    *,
    published: Any = None,
    consistency: Any = None,
    log: list[str] | None = None,
    signed_at: dict[str, int | None] | None = None,
) -> tuple[int, list[str]]:
    """``(records, problems)`` for one refund's or agent purchase's evidence bundle
    (``published`` and ``signed_at`` as for an export: ``"the bundle's checkpoint"``).

    ``consistency``: the answer (parsed) of ``GET /audit/<site id>/proof/consistency?from=A&to=B``
    between the sizes of ``trusted_checkpoint`` and the bundle's checkpoint, which it needs
    when they differ (:func:`bundle_against_trusted`).

    ``log``: the lines of an export of the bundle's site, to show the bundle lists every record
    about its subject (:func:`bundle_against_log`); the trusted checkpoint is then checked
    against the export, which needs no consistency proof."""
    try:
        keys, windows, problems = keys_for(bundle, trusted, published)
    except Failed as failed:
        return 0, [str(failed)]
    origin = bundle.get("origin") or ""
    try:
        size, root = open_checkpoint(bundle.get("checkpoint") or "", origin=origin, keys=keys)
    except ValueError as exc:
        return 0, [*problems, f"FAILED at the bundle's checkpoint: {exc}"]
    _time_of(bundle.get("checkpoint"), "the bundle's checkpoint", origin, keys, signed_at)
    if trusted_checkpoint is not None:
        _time_of(trusted_checkpoint, "the trusted checkpoint", origin, keys, signed_at)
    trusted_size: int | None = None
    if trusted_checkpoint is not None and log is None:
        try:
            trusted_size, trusted_root = open_checkpoint(
                trusted_checkpoint, origin=origin, keys=keys
            )
        except ValueError as exc:
            problems.append(f"FAILED at the trusted checkpoint: {exc}")
        else:
            problems += bundle_against_trusted(
                (trusted_size, trusted_root), (size, root), consistency, bundle.get("site_id")
            )
    field, subject = bundle_subject(bundle)
    if not field:
        problems.append("FAILED at the bundle: it must name one refund_id or one order_id")
    listed = bundle.get("records")
    records: list[Any] = listed if isinstance(listed, list) else []
    if not records:
        problems.append("FAILED at the bundle: it holds no records")
    mandate_sha256 = None
    verified: list[tuple[int, dict[str, Any]]] = []
    listed_seqs: set[int] = set()
    for rec in records:
        seq = rec.get("seq") if isinstance(rec, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            problems.append("FAILED at a record: no integer seq")
            continue
        # Each copy would verify on its own (it carries its own proof): a record listed twice
        # reads as two events, a settlement as a refund paid twice.
        if seq in listed_seqs:
            problems.append(f"FAILED at seq {seq}: the record is listed twice")
            continue
        listed_seqs.add(seq)
        try:
            check_record(
                rec,
                seq=seq,
                site_id=bundle.get("site_id"),
                prev_hash=rec.get("prev_hash", ""),
                keys=keys,
            )
            check_window(rec, seq, windows)
            proof = [base64.b64decode(h, validate=True) for h in rec.get("inclusion_proof") or []]
            verify_inclusion(seq - 1, size, leaf_of(rec["payload"]), proof, root)
        except Failed as failed:
            problems.append(str(failed))
            continue
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"FAILED at seq {seq}: not in the checkpointed log: {exc}")
            continue
        verified.append((seq, rec))
        payload = json.loads(rec["payload"])
        body = payload.get("body") or {}
        if field == "order_id" and not about_subject(field, subject, payload["kind"], body):
            problems.append(
                f"FAILED at seq {seq}: the record is not about {subject_label(field, subject)}"
            )
        elif isinstance(body, dict) and body.get("refund_id") != bundle.get("refund_id"):
            problems.append(f"FAILED at seq {seq}: the record is about another refund")
        if isinstance(body, dict) and body.get("mandate_sha256"):
            mandate_sha256 = body["mandate_sha256"]
    # A record names the records it follows from by their hashes: a settlement (or failure),
    # a needs-attention or a reversal its decision (``decision_hash``), a reviewer's approval
    # or rejection, or an expiry, the escalation it decides (``escalated_hash``). Each named
    # record must be here too, or the bundle no longer shows that it is in the log: taken out
    # with the mandate it names, a held agent refund verified without the agent's request.
    # (Listed is enough: a listed record that does not verify is reported on its own.)
    hashes = {
        r.get("hash") for r in records if isinstance(r, dict) and isinstance(r.get("hash"), str)
    }
    for seq, rec in verified:
        payload = json.loads(rec["payload"])
        body = payload["body"] if isinstance(payload["body"], dict) else {}
        for link, what in LINKS:
            named = body.get(link)
            if not named or (isinstance(named, str) and named in hashes):
                continue
            if link == "decision_hash" and payload["kind"] == "settlement":
                what = "the decision it settles"
            problems.append(f"FAILED at seq {seq}: {what} is not in the bundle")
    if field == "order_id":
        problems += purchase_problems(verified, hashes)
    # In seq order whatever order the file lists them in: reordering must not hide a record
    # a retired key signed after its successor, nor one timed before an earlier record.
    order, times = KeyOrder(windows), TimeOrder()
    counted: list[tuple[datetime, str, int]] = []
    for seq, rec in sorted(verified, key=lambda item: item[0]):
        try:
            order.check(rec, seq)
            times.check(rec, seq)
        except Failed as failed:
            problems.append(str(failed))
        else:
            assert times.last is not None
            counted.append(times.last)
    # Each checkpoint's time follows the bundle's records it counts (the bundle's all: each
    # is in it, by its proof). The log's other records only an export shows (--export).
    what = "the bundle's checkpoint"
    problems += time_problems(bundle.get("checkpoint"), what, origin, keys, windows, counted)
    if trusted_checkpoint is not None and log is None and trusted_size is not None:
        in_it = [time for time in counted if time[2] <= trusted_size]
        problems += time_problems(
            trusted_checkpoint, "the trusted checkpoint", origin, keys, windows, in_it
        )
    if log is not None:
        problems += bundle_against_log(
            bundle,
            log,
            (size, root),
            {seq for seq, _ in verified},
            trusted,
            trusted_checkpoint,
            published=published,
        )
    mandate = bundle.get("mandate")
    if isinstance(mandate, dict):
        try:
            raw = base64.b64decode(mandate.get("bytes_b64") or "", validate=True)
        except ValueError:
            raw = None
        if raw is None:
            problems.append("FAILED at the mandate: its bytes are not base64")
        elif mandate_sha256 is None:
            problems.append("FAILED at the mandate: no decision record names its SHA-256")
        elif hashlib.sha256(raw).hexdigest() != mandate_sha256:
            problems.append("FAILED at the mandate: its bytes are not the ones the decision names")
    elif mandate_sha256 is not None:
        problems.append(
            "FAILED at the mandate: a decision record names its SHA-256, but the bundle does not "
            "carry it"
        )
    return len(records), problems


def purchase_problems(verified: list[tuple[int, dict[str, Any]]], hashes: set[Any]) -> list[str]:
    """What a purchase's bundle must show beyond its records: that Sill decided it on a signed
    mandate before taking the money. So it holds one decision, naming the mandate's SHA-256 (its
    bytes are checked against it with the mandate's), and each of its charge's records names
    that decision's hash: the decision was in the log before the charge (a hash names only a
    record already written). A charge naming none, or a decision not ``approved``, is money
    taken without an approval the bundle shows."""
    decisions, charges = [], []
    for seq, rec in verified:
        payload = json.loads(rec["payload"])
        body = payload["body"] if isinstance(payload["body"], dict) else {}
        if payload["kind"] in PURCHASE_DECISIONS:
            decisions.append((seq, rec, payload["kind"], body))
        elif payload["kind"] in CHARGE_KINDS:
            charges.append((seq, body))
    if not decisions:
        return [
            "FAILED at the bundle: it holds no decision of the purchase: nothing in it shows "
            "Sill decided the charge on a signed mandate"
        ]
    if len(decisions) > 1:
        return [f"FAILED at seq {decisions[1][0]}: a second decision of the purchase"]
    seq, decision, kind, body = decisions[0]
    problems = []
    if not body.get("mandate_sha256"):
        problems.append(f"FAILED at seq {seq}: the purchase's decision names no mandate")
    for charge_seq, charge in charges:
        named = charge.get("decision_hash")
        if named is None:
            problems.append(f"FAILED at seq {charge_seq}: the charge record names no decision")
        elif named not in hashes:
            continue  # reported above: the decision it follows from is not in the bundle
        elif named != decision["hash"]:
            problems.append(
                f"FAILED at seq {charge_seq}: the charge record names another record than the "
                "purchase's decision"
            )
        elif kind != "approved":
            problems.append(
                f"FAILED at seq {charge_seq}: the charge record follows a {kind} decision"
            )
    return problems


def bundle_against_log(
    bundle: dict[str, Any],
    log: list[str],
    signed: tuple[int, bytes],
    verified: set[int],
    trusted: dict[str, Any] | None,
    trusted_checkpoint: str | None,
    *,
    published: Any = None,
) -> list[str]:
    """Problems showing the bundle is not its subject's whole story in ``log``, the lines of an
    export of its site (none when it is).

    A bundle proves each record it lists is in the log; it cannot prove it lists them all (a
    reversal after the settlement, left out, leaves a bundle that verifies). The export can: it
    must verify as an export (against ``trusted_checkpoint`` too, when given) and its first
    records must hash to the root of the bundle's checkpoint (``signed``: size, root), so the
    two are one log; then every record of the export about its subject must be one the bundle
    lists and verified (``verified``: their seqs). A record about it after the bundle's
    checkpoint is a problem too: the bundle was made before its subject's story ended.
    """
    count, problems = verify_export(log, trusted, trusted_checkpoint, published=published)
    if problems:
        # A log that does not verify shows nothing about what the bundle left out.
        return [f"FAILED at the export: {p.removeprefix('FAILED at ')}" for p in problems]
    header = json.loads(log[0])
    if header.get("site_id") != bundle.get("site_id"):
        return [
            f"FAILED at the export: it is the log of site {header.get('site_id')}, not of the "
            f"bundle's site {bundle.get('site_id')}"
        ]
    records = [json.loads(line) for line in log[1:] if line.strip()]
    records = [rec for rec in records if rec.get("type") == "record"]  # all verified, in order
    size, root = signed
    if count < size or merkle_root([leaf_of(r["payload"]) for r in records[:size]]) != root:
        return [
            f"FAILED at the export: its first {size} records are not those of the bundle's "
            "checkpoint: it is not the log the bundle was taken from"
        ]
    field, subject = bundle_subject(bundle)
    if not field:
        return []  # a bundle naming no subject is reported as such: nothing is about it
    label = subject_label(field, subject)
    for rec in records:
        payload = json.loads(rec["payload"])
        seq, kind = rec["seq"], payload["kind"]
        if not about_subject(field, subject, kind, payload["body"]) or seq in verified:
            continue
        if seq <= size:
            problems.append(
                f"FAILED at seq {seq}: a record about {label} ({kind}) the bundle leaves out"
            )
        else:
            problems.append(
                f"FAILED at seq {seq}: a record about {label} ({kind}) after the bundle's "
                f"checkpoint (at seq {size}): make the bundle again"
            )
    return problems


def bundle_against_trusted(
    trusted: tuple[int, bytes], signed: tuple[int, bytes], consistency: Any, site_id: Any
) -> list[str]:
    """Problems with the bundle's checkpoint ``signed`` (size, root) beside the checkpoint the
    auditor kept, ``trusted``: none when they are one tree, or when ``consistency`` (the
    public API's answer, ``{"size1", "size2", "proof": [base64, …]}``) proves the smaller a
    prefix of the larger. A bundle's checkpoint is signed when it is made, so it is rarely the
    one an auditor kept: without the proof between them, a bundle could not be checked against
    it at all."""
    (trusted_size, trusted_root), (size, root) = trusted, signed
    if (trusted_size, trusted_root) == (size, root):
        return []
    if trusted_size == size:
        return [
            f"FAILED at the trusted checkpoint: it counts the same {size} records as the "
            "bundle's checkpoint, under another root: the log was rewritten (forked)"
        ]
    (small, small_root), (large, large_root) = sorted([trusted, signed], key=lambda t: t[0])
    ask = f"/audit/{site_id}/proof/consistency?from={small}&to={large}"
    if consistency is None:
        return [
            f"FAILED at the trusted checkpoint: it is not the bundle's checkpoint (sizes "
            f"{trusted_size} and {size}): pass the proof that one extends the other with "
            f"--consistency FILE, the answer of GET {ask}"
        ]
    listed = consistency.get("proof") if isinstance(consistency, dict) else None
    if not isinstance(listed, list) or not all(isinstance(h, str) for h in listed):
        return [f"FAILED at the consistency proof: not the answer of GET {ask}"]
    asked = (consistency.get("size1"), consistency.get("size2"))
    if asked != (small, large) or not all(type(n) is int for n in asked):
        return [
            f"FAILED at the consistency proof: it is between sizes {asked[0]} and {asked[1]}, "
            f"not {small} and {large}: fetch GET {ask}"
        ]
    try:
        proof = [base64.b64decode(h, validate=True) for h in listed]
    except ValueError:
        return ["FAILED at the consistency proof: a hash of its proof is not base64"]
    try:
        verify_consistency(small, large, small_root, large_root, proof)
    except ValueError as exc:
        return [
            f"FAILED at the consistency proof: {exc}: it does not show that the tree of {large} "
            f"records extends the one of {small} (if GET {ask} answered it, the log was "
            "rewritten between them)"
        ]
    return []


# -- the command --------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What :func:`verify_file` found, and what the bytes it verified say they are."""

    kind: str  # "export" or "bundle"
    count: int
    problems: list[str]
    # The log the file names (``<origin>``, ending with the site's id; its signed checkpoint
    # must name it too, or the file fails), "?" when it names none.
    log: str
    # A bundle's subject (``refund R``, ``the purchase of order O``), which each of its
    # verified records names too; "" for an export.
    about: str


def verify_path(
    path: str,
    trusted: dict[str, Any] | None,
    trusted_checkpoint: str | None,
    *,
    published: Any = None,
    consistency: Any = None,
    log: list[str] | None = None,
    signed_at: dict[str, int | None] | None = None,
) -> tuple[str, int, list[str]]:
    """``(kind, records, problems)`` of :func:`verify_file`."""
    verdict = verify_file(
        path,
        trusted,
        trusted_checkpoint,
        published=published,
        consistency=consistency,
        log=log,
        signed_at=signed_at,
    )
    return verdict.kind, verdict.count, verdict.problems


def verify_file(
    path: str,
    trusted: dict[str, Any] | None,
    trusted_checkpoint: str | None,
    *,
    published: Any = None,
    consistency: Any = None,
    log: list[str] | None = None,
    signed_at: dict[str, int | None] | None = None,
) -> Verdict:
    """The :class:`Verdict` on the file at ``path`` (an export or a bundle), against the keys
    file ``published`` (parsed) when given; ``consistency`` and ``log`` (an export's lines) as
    for a bundle (an export holds its records, so the trusted checkpoint is checked against
    them directly); ``signed_at`` as for :func:`verify_export`.

    The file is read once: what is verified and what the verdict names (its log, a bundle's
    refund or order) are the same bytes, whatever replaces the file meanwhile.

    Raises :class:`WrongInput` when ``path`` is neither an export nor a bundle, ``log`` is not
    an export of the bundle's site, or ``trusted_checkpoint`` is not a checkpoint of the file's
    log: the auditor passed the wrong file, and nothing is verified."""
    data = read_bytes(path, path)
    text = decode_input(data, path, lines=True)
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict) and whole.get("format") == BUNDLE_FORMAT:
        text = decode_input(data, path)  # one document: any byte not UTF-8 makes it no bundle
        try:
            whole = parse_line(text)  # strictly, as an export's lines
        except ValueError as exc:
            return Verdict("bundle", 0, [f"FAILED at the bundle: {exc}"], "?", "?")
        if trusted_checkpoint is not None:
            kept_checkpoint(trusted_checkpoint, "--checkpoint", whole.get("origin"), path)
        if log is not None:
            header = export_header(log, "--export")
            if header.get("site_id") != whole.get("site_id"):
                raise WrongInput(
                    "--export",
                    f"an export of site {header.get('site_id')}, and the bundle {path} is of "
                    f"site {whole.get('site_id')}",
                )
        count, problems = verify_bundle(
            whole,
            trusted,
            trusted_checkpoint,
            published=published,
            consistency=consistency,
            log=log,
            signed_at=signed_at,
        )
        about = subject_label(*bundle_subject(whole))
        return Verdict("bundle", count, cut_numbers(problems), log_of(whole), about)
    # Lines end at "\n" only: str.splitlines() would also cut at U+2028, U+2029 and U+0085,
    # which a record's JSON strings may hold unescaped.
    lines = text.split("\n")
    header = export_header(lines, path)
    if log is not None:
        raise WrongInput(path, "an export: --export completes a bundle")
    if trusted_checkpoint is not None:
        kept_checkpoint(trusted_checkpoint, "--checkpoint", header.get("origin"), path)
    count, problems = verify_export(
        lines, trusted, trusted_checkpoint, published=published, signed_at=signed_at
    )
    return Verdict("export", count, cut_numbers(problems), log_of(header), "")


# A number the file claims (a seq, and what follows from it) of more digits than any Sill
# writes (a seq is a 64-bit integer: 19): printed whole, one of thousands of digits buried the
# line it was in, and every other line naming it.
LONG_NUMBER = re.compile(r"\b\d{21,}\b")


def cut_numbers(problems: list[str]) -> list[str]:
    """``problems`` with each number longer than 20 digits cut to its first 8 and last 5
    digits and its length: ``10000000…00007 (401 digits)``."""

    def cut(match: re.Match[str]) -> str:
        digits = match.group()
        return f"{digits[:8]}\u2026{digits[-5:]} ({len(digits)} digits)"

    return [LONG_NUMBER.sub(cut, problem) for problem in problems]


def log_of(document: dict[str, Any]) -> str:
    """The log (``<origin>``) an export's header or a bundle names: verification checked it
    against the signed checkpoint's."""
    return str(document["origin"]) if document.get("origin") else "?"


def export_header(lines: list[str], argument: str) -> dict[str, Any]:
    """An export's header (its first line); :class:`WrongInput` when ``lines`` are not an
    export this verifier reads."""
    try:
        header = json.loads(lines[0]) if lines else None
    except (ValueError, RecursionError):
        header = None
    if isinstance(header, dict) and header.get("type") == "header":
        if header.get("format") != FORMAT:
            raise WrongInput(
                argument, f"an export of format {header.get('format')!r}, not {FORMAT}"
            )
        return header
    try:
        checkpoint_shape("\n".join(lines))
    except ValueError:
        hint = ""
    else:
        hint = " (a signed checkpoint: pass it with --checkpoint)"
    raise WrongInput(
        argument,
        "neither an export (`manage.py audit export`) nor an evidence bundle (`manage.py audit "
        f"bundle`){hint}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a Sill audit export or evidence bundle.")
    parser.add_argument("file", help="written by `manage.py audit export` or `audit bundle`")
    parser.add_argument(
        "--public-key",
        action="append",
        metavar="KEY_ID=BASE64URL",
        help="a trusted public key (Sill's configured key); when given, the other keys (of the "
        "file, or of --keys) are used only if a pinned key endorses them (repeatable)",
    )
    parser.add_argument(
        "--keys",
        metavar="FILE",
        help="Sill's keys as you fetched them from /.well-known/sill-audit-keys.json: the keys "
        "and windows records are checked against, instead of the ones the file lists",
    )
    parser.add_argument(
        "--checkpoint", metavar="FILE", help="a signed checkpoint of the log you kept yourself"
    )
    parser.add_argument(
        "--consistency",
        metavar="FILE",
        help="for a bundle whose checkpoint is not the one you kept (--checkpoint): the answer "
        "of GET /audit/<site id>/proof/consistency?from=A&to=B between their sizes",
    )
    parser.add_argument(
        "--export",
        metavar="FILE",
        help="for a bundle: an export of its site (`audit export`), to show the bundle lists "
        "every record about its refund or purchase, none left out (the export is verified too)",
    )
    args = parser.parse_args(argv)
    if args.consistency and not args.checkpoint:
        parser.error("--consistency proves a bundle against the checkpoint you kept: pass it too")
    trusted = None
    if args.public_key:
        trusted = {}
        for item in args.public_key:
            key_id, sep, text = item.partition("=")
            try:
                if not sep or not key_id:
                    raise ValueError("expected KEY_ID=BASE64URL")
                trusted[key_id] = load_key(text)
            except ValueError as exc:
                parser.error(f"--public-key {item!r}: {exc}")
    try:
        checkpoint = published = consistency = export = None
        if args.export:
            # At "\n" only, as verify_path reads an export.
            export = read_input(args.export, f"--export {args.export}", lines=True).split("\n")
        if args.checkpoint:
            checkpoint = read_input(args.checkpoint, f"--checkpoint {args.checkpoint}")
        if args.consistency:
            consistency = read_json(args.consistency, f"--consistency {args.consistency}")
        if args.keys:
            published = read_json(args.keys, f"--keys {args.keys}")
            entries = published.get("keys") if isinstance(published, dict) else None
            if not isinstance(entries, list) or not entries:
                raise WrongInput(
                    f"--keys {args.keys}",
                    "no list of keys: not Sill's keys file (/.well-known/sill-audit-keys.json)",
                )
        signed_at: dict[str, int | None] = {}
        verdict = verify_file(
            args.file,
            trusted,
            checkpoint,
            published=published,
            consistency=consistency,
            log=export,
            signed_at=signed_at,
        )
    except WrongInput as wrong:
        # verify_path names its arguments by their role; main knows the paths.
        message = str(wrong)
        for flag, path in (("--checkpoint", args.checkpoint), ("--export", args.export)):
            message = message.replace(f"WRONG INPUT: {flag}: ", f"WRONG INPUT: {flag} {path}: ")
        print(message, file=sys.stderr)
        return WRONG_INPUT
    if verdict.problems:
        print("\n".join(verdict.problems), file=sys.stderr)
        return 1
    # Which log: the checkpoint that verified names it (its origin ends with the site's id),
    # so an auditor handed another site's genuine export sees it is not the one they asked for.
    # From the bytes verified (the file is read once): one swapped in since names nothing here.
    kind, count = verdict.kind, verdict.count
    if kind == "bundle":
        # And which refund or purchase: every record verified is about the one the bundle
        # names, so an auditor handed another's genuine bundle sees it is not the one asked for.
        print(
            f"OK: bundle of {count} records about {verdict.about} of log "
            f"{verdict.log}, each in the signed checkpoint"
            + ("; the export holds no other record about it" if args.export else "")
        )
    else:
        print(f"OK: {count} records of log {verdict.log}, matching their signed checkpoint")
    # How fresh the evidence is: the time each checkpoint's key signed with it (the OK line
    # stays as it was, for scripts reading it).
    for what, label in (
        (f"the {kind}'s checkpoint", "Its checkpoint"),
        ("the trusted checkpoint", "The checkpoint you kept (--checkpoint)"),
    ):
        if what in signed_at:
            print(f"{label} {signed_time_text(signed_at[what])}.")
    if (note := unpinned_note(trusted, keys_file=args.keys is not None)) is not None:
        print(note, file=sys.stderr)
    return 0


def signed_time_text(timestamp: int | None) -> str:
    if timestamp is None:
        return "carries no signed time (Sill signed it before it timed its checkpoints)"
    return f"was signed at {utc_seconds(timestamp)}"


def utc_seconds(timestamp: int) -> str:
    """A checkpoint's time (POSIX seconds) as a reader reads it."""
    try:
        at = datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, ValueError, OSError):
        return f"{timestamp} seconds since 1970 (beyond the calendar)"
    return f"{at:%Y-%m-%d %H:%M:%S} UTC"


def read_json(path: str, argument: str) -> Any:
    try:
        return parse_line(read_input(path, argument))
    except ValueError as exc:
        raise WrongInput(argument, str(exc)) from None


def unpinned_note(trusted: dict[str, Any] | None, *, keys_file: bool) -> str | None:
    """What an OK without ``--public-key`` does not show (None when keys were pinned): whose
    keys the signatures were checked with. The OK line stays as it is, for scripts reading it;
    this goes to standard error beside it."""
    if trusted:
        return None
    taken = "the keys file as you gave it" if keys_file else "the file itself (its header's keys)"
    return (
        f"NOTE: no key was pinned: the signatures were checked with keys taken from {taken}, "
        "so this shows the file is consistent, not that Sill signed it. Pin Sill's configured "
        "key, obtained apart from this file, with --public-key KEY_ID=BASE64URL."
    )


if __name__ == "__main__":
    sys.exit(main())
