"""The standalone verifier's small JCS writer agrees with rfc8785 on what Sill writes."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from audit import chain, verify_export

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_it_agrees_with_rfc8785(value: object) -> None:
    assert verify_export.jcs(value).encode("utf-8") == rfc8785.dumps(value)
    assert chain.canonical(value) == rfc8785.dumps(value)


@given(st.dictionaries(st.text(alphabet=st.characters(codec="utf-8"), max_size=3), st.none()))
def test_it_sorts_keys_by_utf16_code_units(value: dict[str, None]) -> None:
    assert verify_export.jcs(value).encode("utf-8") == rfc8785.dumps(value)


def test_it_sorts_astral_keys_below_high_bmp_keys() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16, which sorts before U+FFFD.
    value = {"\ufffd": 1, "\U0001f600": 2}
    assert verify_export.jcs(value) == '{"\U0001f600":2,"\ufffd":1}'
    assert verify_export.jcs(value).encode() == rfc8785.dumps(value)


@pytest.mark.parametrize("bad", [1.0, 2**53, float("nan")])
def test_it_refuses_what_sill_never_writes(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        verify_export.jcs(bad)
    with pytest.raises((TypeError, ValueError)):
        chain.canonical(bad)
