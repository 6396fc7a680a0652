"""RFC 8785 (JCS) bytes of a parsed JSON document, at the speed of the C JSON encoder.

:func:`canonical` gives exactly what ``rfc8785.dumps`` gives for the same value (with every
``Decimal`` read as ``float(d)``, as a plain JSON parser would hold it), and raises what it
raises. It is meant for values :func:`sill.jsonbody.loads` returns (dict with str keys, list,
str, int, ``Decimal``, bool, None) and for values built from them; the reference path takes
anything else.

Why the C encoder is exact here: ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` escapes strings exactly as JCS does (``\\"``, ``\\\\``, ``\\b \\f \\n
\\r \\t``, other control characters as lower-case ``\\u00xx``, nothing else) and writes ints
and ``null``/``true``/``false`` the same way. It differs from JCS in three places, each
handled (floats, which a parsed document never holds, are caught too):

- *numbers*: ``Decimal`` is not a type the encoder knows, so it asks :func:`_number`. An
  integral double below 2**53 is written as the int it equals (JCS writes ``89``, not
  ``89.0``); a fractional one of magnitude at least 1e-4 as ``repr(float)``, which is JCS's
  shortest round-trip form without an exponent in that range. Anything else (tiny or huge
  numbers) takes the reference path;
- *integers beyond 2**53 - 1*, which JCS refuses: any run of 16 digits in the output sends
  the value to the reference path (which refuses it, or writes it when the digits were text);
- *floats*: Python writes ``1.0``, ``1e-05`` and ``1e+16`` where JCS writes ``1``,
  ``0.00001`` and ``10000000000000000``; any number written that way takes the reference
  path (a fractional float in [1e-4, 1e16) is written alike by both);
- *key order*: JCS sorts by UTF-16 code units, Python by code points; the two orders differ
  only for keys holding characters at or above U+E000, and any such character in the output
  sends the value to the reference path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

import rfc8785

_INT_LIMIT = 2**53  # JCS numbers are doubles: integers are exact only below this
_SMALLEST_PLAIN = 1e-4  # below this, Python's repr uses an exponent where JCS does not

# What sends a value to the reference path, looked for in the encoded bytes with one
# ``bytes.translate`` and a few substring searches (a regex costs more than the encoding):
# 16 digits in a row (a possible integer beyond 2**53 - 1), a float written the Python way
# (``1.0``, ``1e-05``, ``1e+16``), or a UTF-8 lead byte of a character at or above U+E000
# (0xEE and up), whose key may sort differently in UTF-16. Inside strings these are false
# alarms, answered (correctly) by the reference path.
_CLASS_TABLE = bytes.maketrans(  # every digit becomes 0, "+" "-", those lead bytes "^"
    b"0123456789+" + bytes(range(0xEE, 0x100)), b"0000000000-" + b"^" * (0x100 - 0xEE)
)


def _needs_reference(data: bytes) -> bool:
    if b".0," in data or b".0}" in data or b".0]" in data:  # an integral float: JCS writes 1
        return True
    classes = data.translate(_CLASS_TABLE)
    return b"0000000000000000" in classes or b"0e-" in classes or b"^" in classes


class _Reference(Exception):
    """This value needs the reference canonicaliser."""


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        number = float(value)
        if number.is_integer():
            if -_INT_LIMIT < number < _INT_LIMIT:
                return int(number)
        elif abs(number) >= _SMALLEST_PLAIN and number - number == 0:  # finite
            return number
    raise _Reference


_STRING = encode_basestring  # the C escaper when there is one; JCS's escaping
_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    sort_keys=True,
    separators=(",", ":"),
    allow_nan=False,
    check_circular=False,  # parsed documents hold no cycles; a hand-made one recurses and fails
    default=_number,
)


def string(text: str) -> str:
    """One string in JCS form, quotes included (``UnicodeEncodeError`` on a lone surrogate
    comes when the caller encodes the result)."""
    return _STRING(text)


def canonicalisable(value: Any) -> Any:
    """``value`` as a standard JSON parser would hold it: every ``Decimal`` becomes a float."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Mapping):
        return {key: canonicalisable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [canonicalisable(item) for item in value]
    return value


def reference(value: Any) -> bytes:
    """The reference: ``rfc8785.dumps`` of :func:`canonicalisable` ``(value)``."""
    return rfc8785.dumps(canonicalisable(value))


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``; identical to :func:`reference`, errors included.

    Object keys must be strings (as every parsed document's are): the C encoder would write
    an int key as text where the reference refuses it."""
    if type(value) is dict or type(value) is list:
        try:
            text = _ENCODER.encode(value)
        except (_Reference, TypeError, ValueError, RecursionError):
            return reference(value)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the reference refuses it
            return reference(value)
        if not _needs_reference(data):
            return data
    return reference(value)
