"""The fast canonicaliser (sill.jcs) writes exactly what rfc8785 writes, and refuses alike."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sill import jcs, jsonbody

TRICKY_TEXT = st.text(
    alphabet=st.sampled_from(
        [
            '"',
            "\\",
            "\b",
            "\f",
            "\n",
            "\r",
            "\t",
            "\x01",
            "\x1f",
            "\x7f",
            "a",
            "é",
            "\u2028",
            "\ud7ff",
            "\ue000",
            "\uffff",
            "\U0001f600",
            "\U0010ffff",
            "0",
            "9",
            ".",
            "e",
            "-",
            "]",
        ]
    ),
    max_size=6,
)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda d: -324 <= d.adjusted() <= 308
) | st.sampled_from(
    [Decimal(t) for t in ("89.00", "0.1", "1E2", "-0.0", "1e-5", "0.0001", "1e20", "1e21",
                          "9007199254740993.0", "5e-324", "123456789.123456789", "-20.5")]
)  # fmt: skip
INTEGERS = st.integers(min_value=-(2**60), max_value=2**60) | st.sampled_from(
    [2**53 - 1, 2**53, -(2**53 - 1), -(2**53), 10**15, 10**16 - 1, 0]
)
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1.0, -0.0, 1e-5, 1e16, 1e21, 0.5, 123.25]
)
SCALARS = st.none() | st.booleans() | INTEGERS | DECIMALS | FLOATS | TRICKY_TEXT
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


def outcome(fn: Any, value: Any) -> Any:
    try:
        return fn(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        return type(exc)


@settings(max_examples=600)
@given(st.dictionaries(TRICKY_TEXT, VALUES, max_size=5) | st.lists(VALUES, max_size=4))
def test_it_writes_what_rfc8785_writes(value: Any) -> None:
    assert outcome(jcs.canonical, value) == outcome(jcs.reference, value)


@settings(max_examples=300)
@given(st.dictionaries(TRICKY_TEXT, VALUES, max_size=5))
def test_it_agrees_on_parsed_documents(value: Any) -> None:
    # The documents it is meant for: what the strict reader returns (Decimals, no floats).
    text = json.dumps(jcs.canonicalisable(value), ensure_ascii=bool(len(str(value)) % 2))
    try:
        doc = jsonbody.loads(text.encode("utf-8", "surrogatepass"))
    except jsonbody.MalformedJSON:
        return
    assert outcome(jcs.canonical, doc) == outcome(jcs.reference, doc)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": Decimal("89.00"), "a": Decimal("20.50")}, b'{"a":20.5,"b":89}'),
        ({"x": Decimal("1e-7")}, b'{"x":1e-7}'),
        ({"x": Decimal("1e21")}, b'{"x":1e+21}'),
        ({"x": Decimal("1e20")}, b'{"x":100000000000000000000}'),
        ({"x": Decimal("-0.0"), "y": 1.0}, b'{"x":0,"y":1}'),
        ({"x": "\u2028\x7f\x1f\"\\"}, b'{"x":"\xe2\x80\xa8\x7f\\u001f\\"\\\\"}'),
        ({"\ufffd": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ufffd":1}'.encode()),
        ({"big": 2**53 - 1, "text": "12345678901234567890"},
         b'{"big":9007199254740991,"text":"12345678901234567890"}'),
    ],
)  # fmt: skip
def test_it_writes_the_tricky_cases_as_jcs_does(value: Any, expected: bytes) -> None:
    assert jcs.canonical(value) == expected == jcs.reference(value)


@pytest.mark.parametrize(
    "bad", [{"n": 2**53}, {"n": -(2**53)}, {"s": "\ud800"}, {"f": float("nan")}]
)
def test_it_refuses_what_jcs_cannot_write(bad: dict[str, Any]) -> None:
    with pytest.raises(rfc8785.CanonicalizationError):
        jcs.canonical(bad)
