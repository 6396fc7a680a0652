"""``sill.jsonbody``: the strict JSON every request body is read with.

Depth is counted on the raw bytes without recursion (issue 9, defect 3); duplicate keys,
constants, out-of-range numbers, NUL and lone surrogates are refused (defect 4 and siblings).
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from django.test import RequestFactory
from rest_framework.request import Request

from sill.jsonbody import (
    MAX_DEPTH,
    BodyTooLarge,
    MalformedJSON,
    loads,
    nested_deeper_than,
    read_at_most,
)


def _arrays(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def _objects(levels: int) -> bytes:
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


def _refusal(raw: bytes | str, **kwargs) -> MalformedJSON:
    with pytest.raises(MalformedJSON) as caught:
        loads(raw, **kwargs)
    assert (caught.value.code, caught.value.status) == ("malformed", 400)
    return caught.value


@pytest.mark.parametrize("nest", [_arrays, _objects])
def test_it_allows_32_levels_and_refuses_33(nest):
    assert MAX_DEPTH == 32
    assert loads(nest(32)) is not None

    error = _refusal(nest(33))

    assert error.message == "The body is nested deeper than 32 levels."


def test_it_counts_mixed_arrays_and_objects():
    doc = b'{"a": [{"b": [' * 8 + b"1" + b"]}]}" * 8  # 4 * 8 = 32 levels
    assert loads(doc)["a"][0]["b"][0]["a"]
    assert _refusal(b"[" + doc + b"]").message.startswith("The body is nested deeper")


@pytest.mark.parametrize("levels", [400, 800, 5_000, 100_000])
def test_it_refuses_deep_nesting_without_recursing(levels):
    assert _refusal(_arrays(levels)).message.startswith("The body is nested deeper")
    assert _refusal(b"[" * levels).message.startswith("The body is nested deeper")  # unclosed


@pytest.mark.parametrize(
    "text",
    [
        '["' + "[{" * 100 + '"]',
        '{"k' + "[" * 100 + '": "' + "{" * 100 + '"}',
        '["\\"' + "[" * 100 + '"]',  # an escaped quote does not end the string
        '["\\\\", ' + "[" * 30 + "]" * 30 + "]",  # an escaped backslash does
        '["\u00e9[\u4e2d' + "[" * 100 + '"]',  # multi-byte UTF-8 around the brackets
    ],
)
def test_brackets_inside_strings_do_not_count(text):
    assert loads(text.encode()) == json.loads(text)


def test_counting_is_one_cheap_pass():
    flat = b"[" + b",".join([b"[]"] * 21_000) + b"]"  # 64 KB of brackets, 2 levels deep
    started = time.perf_counter()
    for _ in range(10):
        assert not nested_deeper_than(flat)
    assert (time.perf_counter() - started) / 10 < 0.05
    small = b'{"signed": {"a": [1, 2, {"b": "c"}]}, "envelope": {"k": "v"}}'
    started = time.perf_counter()
    for _ in range(1000):
        assert not nested_deeper_than(small)
    assert (time.perf_counter() - started) / 1000 < 0.0005


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"amount": "1.00", "amount": "2.00"}', "amount"),
        ('{"a": {"b": 1, "b": 1}}', "b"),
        ('[{"x": [{"y": 1, "y": 2}]}]', "y"),
        ('{"a": 1, "\\u0061": 2}', "a"),  # the same key, spelled with an escape
    ],
)
def test_it_refuses_duplicate_keys_at_any_depth(text, key):
    assert _refusal(text).message == f"The key {key!r} appears twice in one object."


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_it_refuses_nan_and_infinity(constant):
    assert _refusal(f'{{"amount": {constant}}}').message == "The body is not valid JSON."


@pytest.mark.parametrize("number", ["1e309", "1e999999999", "-1e400", "1e-400", "0e-999999999"])
def test_it_refuses_numbers_a_double_cannot_hold(number):
    assert _refusal(f"[{number}]").message == f"The number {number} is out of range."


def test_it_reads_numbers_exactly():
    doc = loads(b'{"a": 15.00, "b": 1e2, "c": 7, "d": -0.0, "e": 1.7976931348623157e308}')
    assert doc == {"a": Decimal("15.00"), "b": Decimal("1e2"), "c": 7, "d": Decimal("-0.0"),
                   "e": Decimal("1.7976931348623157e308")}  # fmt: skip
    assert str(doc["a"]) == "15.00" and isinstance(doc["c"], int)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a": "x\\u0000"}', "The body holds a NUL character (\\u0000)."),
        (b'{"a\\u0000": 1}', "The body holds a NUL character (\\u0000)."),
        (b'[["\\ud800"]]', "The body holds an unpaired surrogate (\\ud800-\\udfff)."),
        (b'{"a": "\\udc00x"}', "The body holds an unpaired surrogate (\\ud800-\\udfff)."),
        (b'["a\x00"]', "The body is not valid JSON."),
        (b"\xff{}", "The body is not UTF-8."),
        (b'{"a": 1', "The body is not valid JSON."),
        (b"\xef\xbb\xbf{}", "The body is not valid JSON."),
    ],
)
def test_it_refuses_what_text_fields_cannot_store(raw, message):
    assert _refusal(raw).message == message


def test_it_keeps_escapes_that_are_fine():
    assert loads(b'["\\\\u0000", "\\ud83d\\ude00", "\\u00e9"]') == ["\\u0000", "\U0001f600", "é"]


def test_it_reads_the_declared_encoding():
    assert loads('{"a": ["\u00e9"]}'.encode("utf-16"), encoding="utf-16") == {"a": ["é"]}
    assert _refusal(b'["a"]', encoding="no-such-codec").message == "The body is not NO-SUCH-CODEC."
    assert _refusal(("[" * 33 + "]" * 33).encode("utf-16"), encoding="utf-16")


# --- StrictJSONParser: how much of a body it reads --------------------------------------------


class _Trickle:
    """A request body arriving in 4 KiB pieces (a chunked upload), counting what was read:
    ``read()`` returns all the rest, ``read(n)`` at most 4 KiB of it, like a socket."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.taken = 0

    def read(self, size: int = -1) -> bytes:
        size = len(self.data) if size is None or size < 0 else min(size, 4096)
        piece = self.data[self.taken : self.taken + size]
        self.taken += len(piece)
        return piece


def _parser():
    """sill.api's parser, imported once DRF's views are (they import sill.api, which imported
    first would find DRF half-loaded: tests/test_rate_limits.py does the same)."""
    from rest_framework import views  # noqa: F401

    from sill.api import StrictJSONParser

    return StrictJSONParser()


def _without_length() -> Request:
    request = Request(RequestFactory().post("/", data=b"{}", content_type="application/json"))
    del request._request.META["CONTENT_LENGTH"]
    return request


@pytest.mark.parametrize("with_request", [False, True], ids=["bare", "request-without-length"])
def test_the_parser_reads_at_most_one_byte_past_the_limit(settings, with_request):
    context = {"request": _without_length()} if with_request else {}
    limit = settings.SILL_API_MAX_BODY_BYTES
    body = _Trickle(b'{"note": "' + b"x" * (10 * 1024 * 1024) + b'"}')

    with pytest.raises(BodyTooLarge) as caught:
        _parser().parse(body, "application/json", context)

    assert (caught.value.code, caught.value.status) == ("too_large", 413)
    assert body.taken <= limit + 1


def test_the_parser_reads_a_body_at_the_limit_in_pieces(settings):
    limit = settings.SILL_API_MAX_BODY_BYTES
    body = b'{"note": "' + b"x" * (limit - 12) + b'"}'
    assert len(body) == limit

    parsed = _parser().parse(_Trickle(body), "application/json", {})

    assert parsed == {"note": "x" * (limit - 12)}


def test_the_parser_refuses_a_declared_length_over_the_limit_unread(settings):
    request = Request(RequestFactory().post("/", data=b"{}", content_type="application/json"))
    request._request.META["CONTENT_LENGTH"] = str(settings.SILL_API_MAX_BODY_BYTES + 1)
    body = _Trickle(b"{}")

    with pytest.raises(BodyTooLarge):
        _parser().parse(body, "application/json", {"request": request})

    assert body.taken == 0


@pytest.mark.parametrize(
    ("declared", "refused"),
    [("65537", True), ("0" * 4400 + "2", True), ("65536", False), ("\u00b2", False), ("-1", False)],
)
def test_read_at_most_trusts_only_a_length_in_ascii_digits(declared, refused):
    body = _Trickle(b"{}")

    if refused:
        with pytest.raises(BodyTooLarge):
            read_at_most(body, 64 * 1024, declared=declared)
        assert body.taken == 0
    else:  # read, to the limit at most
        assert read_at_most(body, 64 * 1024, declared=declared) == b"{}"
