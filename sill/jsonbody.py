"""Strict JSON for request bodies: the one reader every JSON edge of Sill uses.

The mandate API (``refunds.agent.mandates``) and every DRF endpoint (``sill.api.StrictJSONParser``,
the project's default parser) read bodies with :func:`loads`. Before that, a body longer than
its endpoint allows is ``413 too_large`` (:class:`BodyTooLarge`) without being read whole:
:func:`read_at_most` refuses a Content-Length over the limit before reading a byte, and
otherwise reads one byte past the limit at most. :func:`loads` refuses, as ``400 malformed``
(:class:`MalformedJSON`), what a lenient parser would quietly accept or crash on:

- text that is not valid in the declared encoding (UTF-8 unless the request says otherwise);
- nesting deeper than :data:`MAX_DEPTH` levels (the top-level array or object is level 1),
  counted on the raw bytes *before* parsing, so neither the parser nor any code that walks the
  result can exhaust the stack (a 1.5 KB body nested 800 levels deep was a 500);
- a key repeated in one object, at any depth (a lenient parser keeps the last one, so
  ``{"amount": "1.00", "amount": "2.00"}`` would mean 2.00 to us and maybe 1.00 to a proxy);
- ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON;
- a number a double cannot hold (beyond ±1.8e308, or a decimal exponent below -324):
  ``1e999999999`` would otherwise become a billion-digit string on its way to an amount;
- a NUL character or an unpaired surrogate in any string or key: no field has a use for
  them, PostgreSQL text cannot hold NUL, and a lone surrogate cannot even be encoded as UTF-8.

Numbers with a fraction or an exponent come back as ``Decimal`` (never ``float``: money), and
integers as ``int``. Pure: no Django, so the mandate verifier stays importable on its own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from itertools import accumulate
from typing import Any

from sill.errors import SillError

MAX_DEPTH = 32

# One JSON string (escapes included). In UTF-8 every byte of a multi-byte character is >= 0x80,
# so quotes, backslashes and brackets are found on the raw bytes without decoding.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = 1
_STEP[ord("]")] = -1
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class MalformedJSON(SillError):
    """A body that is not strict JSON: always ``400 malformed``."""

    code = "malformed"
    status = 400


class BodyTooLarge(SillError):
    """A body longer than its endpoint's limit: always ``413 too_large``, as the mandate API
    and Slack's interactions answer too."""

    code = "too_large"
    status = 413


class _DuplicateKey(ValueError):
    pass


class _OutOfRange(ValueError):
    pass


def read_at_most(stream: Any, limit: int, *, declared: str | None = None) -> bytes:
    """The whole body in ``stream`` (anything with ``read(n)``), or :class:`BodyTooLarge` if
    it is longer than ``limit`` bytes; never more than ``limit + 1`` bytes are read.

    ``declared`` is the request's Content-Length, if it sent one: over the limit, the body is
    refused before a byte of it is read. A body without one (a chunked upload), or with one
    that understates it, is read in as many reads as the stream needs (a socket answers a
    large read in pieces) until it ends or passes the limit.
    """
    # ASCII digits only and at most 15 of them before int(): "²".isdigit() is true, and int()
    # refuses more than 4300 digits (a 500). Sixteen digits are more than any limit anyway.
    length = declared or ""
    if length.isascii() and length.isdigit() and (len(length) > 15 or int(length) > limit):
        raise BodyTooLarge(f"The body is larger than {limit} bytes.")
    pieces: list[bytes] = []
    taken = 0
    while taken <= limit:
        piece = stream.read(limit + 1 - taken)
        if not piece:
            break
        pieces.append(piece)
        taken += len(piece)
    if taken > limit:
        raise BodyTooLarge(f"The body is larger than {limit} bytes.")
    return b"".join(pieces)


def nested_deeper_than(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether UTF-8 JSON ``raw`` nests arrays and objects deeper than ``limit`` levels.

    Brackets inside strings don't count. No recursion, and linear passes in C only (a regex
    that drops the strings, ``bytes.translate``, ``accumulate``): about 1 µs for a usual body,
    which has at most ``limit`` opening brackets and returns at once, a few ms for 64 KB of
    brackets. On text that is not JSON it counts at least as deep as a parser would get.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    skeleton = _STRING.sub(b"", raw).translate(_TO_SQUARE, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0) > limit


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a key seen twice in one object."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _decimal(text: str) -> Decimal:
    """``parse_float``: the number exactly, if a double could hold it (else ``_OutOfRange``)."""
    number = Decimal(text)
    # The exponent check first: it is cheap and keeps float() away from 1e999999999.
    if not -324 <= number.adjusted() <= 308 or math.isinf(float(number)):
        raise _OutOfRange(text)
    return number


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_strings(value: Any) -> None:
    """Refuse a NUL or an unpaired surrogate in any string or key of ``value``."""
    if isinstance(value, str):
        found = _BAD_CHAR.search(value)
        if found is None:
            return
        if found.group() == "\x00":
            raise MalformedJSON("The body holds a NUL character (\\u0000).")
        raise MalformedJSON("The body holds an unpaired surrogate (\\ud800-\\udfff).")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def loads(raw: bytes | str, *, encoding: str = "utf-8") -> Any:
    """Parse a request body strictly (see the module docstring); ``MalformedJSON`` otherwise."""
    if isinstance(raw, str):
        text, data = raw, raw.encode("utf-8", "surrogatepass")
    else:
        try:
            text = bytes(raw).decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise MalformedJSON(f"The body is not {encoding.upper()}.") from None
        data = bytes(raw) if encoding.lower().replace("-", "") == "utf8" else text.encode()
    if nested_deeper_than(data):
        raise MalformedJSON(f"The body is nested deeper than {MAX_DEPTH} levels.")
    try:
        doc = json.loads(
            text,
            parse_float=_decimal,
            parse_constant=_refuse_constant,
            object_pairs_hook=unique_object,
        )
    except _DuplicateKey as exc:
        raise MalformedJSON(f"The key {exc.args[0]!r} appears twice in one object.") from None
    except _OutOfRange as exc:
        raise MalformedJSON(f"The number {exc.args[0]} is out of range.") from None
    except (ValueError, RecursionError):
        raise MalformedJSON("The body is not valid JSON.") from None
    # A NUL or a lone surrogate can only come from a \u escape: the parser refuses a raw NUL
    # and decoding never yields a surrogate, so most bodies skip the walk (bounded: the depth
    # is checked).
    if "\\u" in text:
        _check_strings(doc)
    return doc
