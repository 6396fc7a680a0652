"""ULID-style identifiers: 26 Crockford base32 characters, sortable by creation time."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now_ms: int | None = None) -> str:
    """48 bits of milliseconds then 80 random bits, as 26 base32 characters."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """A prefixed id such as ``ord_01K6HX...``; the prefix says what the id names."""
    return f"{prefix}_{new_ulid()}"
