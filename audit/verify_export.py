#!/usr/bin/env python3
"""Verify a Sill audit export without Sill: Python 3.11+ standard library and PyNaCl only.

    python verify_export.py export.jsonl [--public-key KEY_ID=BASE64URL ...]

The export (``manage.py audit export --site S``) is JSON lines: a header
``{"type": "header", "format": "sill-audit-export-v1", "site_id", "public_keys"}`` and then
one ``{"type": "record", "site_id", "seq", "kind", "payload", "prev_hash", "hash",
"signature", "key_id"}`` per record, in seq order. For every record this checks, in order:
seq is the previous + 1 (the first is 1); ``payload`` is canonical JSON (RFC 8785) whose
site_id/seq/kind equal the record's; ``prev_hash`` is the previous hash (64 zeros first);
``hash == sha256(prev_hash + payload)``; ``signature`` is ed25519 over the hash's 32 bytes.

The header's public keys come with the file, so they prove only that the file is consistent.
Pass the keys you trust with ``--public-key`` (then only those are used). Exit 0 and print
``OK: N records``, or exit 1 and print ``FAILED at seq N: problem`` (for a deleted record, N is
the record after the gap). Records cut from the end of a file cannot be detected here.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
from typing import Any

import nacl.exceptions
import nacl.signing

FORMAT = "sill-audit-export-v1"
GENESIS_HASH = "0" * 64
MAX_SAFE_INTEGER = 2**53 - 1
PAYLOAD_KEYS = {"site_id", "seq", "kind", "recorded_at", "body"}
HASH_RE = re.compile(r"\A[0-9a-f]{64}\Z")
SIGNATURE_RE = re.compile(r"\A[A-Za-z0-9_-]{86}\Z")


class Failed(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"FAILED at {where}: {problem}")


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
        canonical = jcs(payload)
    except (ValueError, TypeError) as exc:
        raise Failed(f"seq {seq}", f"payload is not canonical JSON: {exc}") from None
    if canonical != text:
        raise Failed(f"seq {seq}", "payload is not in canonical form")
    if not isinstance(payload, dict) or set(payload) != PAYLOAD_KEYS:
        raise Failed(
            f"seq {seq}", "payload does not have exactly site_id, seq, kind, recorded_at, body"
        )
    if rec.get("site_id") != site_id:
        raise Failed(f"seq {seq}", f"record belongs to site {rec.get('site_id')}, not {site_id}")
    for field in ("site_id", "seq", "kind"):
        mine, theirs = payload[field], rec.get(field)
        if mine != theirs or type(mine) is not type(theirs):
            raise Failed(f"seq {seq}", f"payload {field} {mine!r} != record {theirs!r}")
    if rec.get("prev_hash") != prev_hash:
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


def verify_file(path: str, trusted: dict[str, nacl.signing.VerifyKey] | None) -> int:
    """Return the number of records; raise :class:`Failed` at the first problem."""
    with open(path, encoding="utf-8") as fh:
        lines = iter(enumerate(fh, start=1))
        try:
            _, first = next(lines)
            header = json.loads(first)
        except (StopIteration, ValueError):
            raise Failed("line 1", "no header") from None
        if not isinstance(header, dict) or header.get("type") != "header":
            raise Failed("line 1", "no header")
        if header.get("format") != FORMAT:
            raise Failed("line 1", f"unknown format {header.get('format')!r}")
        site_id = header.get("site_id")
        if trusted is not None:
            keys = trusted
        else:
            try:
                keys = {k: load_key(v) for k, v in dict(header.get("public_keys") or {}).items()}
            except (ValueError, TypeError, AttributeError) as exc:
                raise Failed("line 1", f"bad public_keys: {exc}") from None
        prev_seq, prev_hash, count = 0, GENESIS_HASH, 0
        for lineno, line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise Failed(f"seq {prev_seq + 1}", f"line {lineno} is not JSON") from None
            if not isinstance(rec, dict) or rec.get("type") != "record":
                raise Failed(f"seq {prev_seq + 1}", f"line {lineno} is not a record")
            seq = rec.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool):
                raise Failed(f"seq {prev_seq + 1}", f"line {lineno} has no integer seq")
            if seq != prev_seq + 1:
                what = "missing" if seq > prev_seq + 1 else "out of order"
                raise Failed(f"seq {seq}", f"expected seq {prev_seq + 1}, found {seq}: {what}")
            prev_hash = check_record(rec, seq=seq, site_id=site_id, prev_hash=prev_hash, keys=keys)
            prev_seq, count = seq, count + 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a Sill audit export (JSON lines).")
    parser.add_argument("export", help="file written by `manage.py audit export`")
    parser.add_argument(
        "--public-key",
        action="append",
        metavar="KEY_ID=BASE64URL",
        help="a trusted public key; when given, the file's own keys are ignored (repeatable)",
    )
    args = parser.parse_args(argv)
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
        count = verify_file(args.export, trusted)
    except Failed as failed:
        print(failed, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"FAILED: cannot read {args.export}: {exc}", file=sys.stderr)
        return 1
    print(f"OK: {count} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
