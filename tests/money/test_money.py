"""Money: exact parsing of major units, per-currency formatting, no mixed currencies."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sill.money import Money, MoneyError, exponent, format_money, parse_major

CURRENCIES = ["USD", "EUR", "JPY", "KRW", "BHD", "KWD", "JOD", "GBP"]


@pytest.mark.parametrize(
    ("code", "exp"),
    [("USD", 2), ("EUR", 2), ("JPY", 0), ("KRW", 0), ("BHD", 3), ("KWD", 3), ("JOD", 3)],
)
def test_it_knows_iso_4217_exponents(code, exp):
    assert exponent(code) == exp


@pytest.mark.parametrize(
    ("text", "code", "minor"),
    [("89.00", "USD", 8900), ("89", "USD", 8900), ("0.01", "USD", 1), ("1200", "JPY", 1200),
     ("1.234", "KWD", 1234), ("1.2", "BHD", 1200), ("-5.00", "EUR", -500)],
)  # fmt: skip
def test_it_parses_major_units_exactly(text, code, minor):
    assert parse_major(text, code) == Money(minor, code)
    assert parse_major(Decimal(text), code) == Money(minor, code)


@pytest.mark.parametrize(
    ("text", "code"),
    [("1.001", "USD"), ("1.5", "JPY"), ("1.2345", "KWD"), ("abc", "USD"), ("", "USD"),
     ("1e3", "USD"), ("NaN", "USD"), ("1.00", "XXX"), ("1.00", "usdd")],
)  # fmt: skip
def test_it_refuses_what_the_currency_cannot_hold(text, code):
    with pytest.raises(MoneyError):
        parse_major(text, code)


def test_it_refuses_floats_and_non_finite_decimals():
    with pytest.raises(MoneyError):
        parse_major(1.5, "USD")  # a float on purpose
    with pytest.raises(MoneyError):
        parse_major(Decimal("Infinity"), "USD")


def test_it_refuses_mixed_currencies():
    with pytest.raises(MoneyError):
        Money(100, "USD") + Money(100, "EUR")
    with pytest.raises(MoneyError):
        _ = Money(100, "USD") < Money(100, "EUR")


def test_it_is_frozen():
    m = Money(1, "USD")
    with pytest.raises(AttributeError):
        m.amount_minor = 2  # frozen: must raise


@pytest.mark.parametrize(
    ("money", "text"),
    [(Money(8900, "USD"), "$89.00"), (Money(1250, "EUR"), "€12.50"), (Money(1200, "JPY"), "¥1,200"),
     (Money(1234, "KWD"), "KWD 1.234"), (Money(123456789, "USD"), "$1,234,567.89"),
     (Money(-500, "GBP"), "-£5.00"), (Money(5, "BHD"), "BHD 0.005")],
)  # fmt: skip
def test_it_formats_per_currency(money, text):
    assert format_money(money) == text


@given(st.sampled_from(CURRENCIES), st.integers(min_value=-(10**15), max_value=10**15))
def test_parsing_the_major_string_round_trips(code, minor):
    money = Money(minor, code)
    assert parse_major(money.major_str(), code) == money
    assert parse_major(money.amount, code) == money


@given(st.sampled_from(CURRENCIES), st.integers(min_value=0, max_value=10**15))
def test_formatting_shows_exactly_the_currency_decimals(code, minor):
    text = format_money(Money(minor, code))
    digits = text.split(" ")[-1].lstrip("$€¥£₩")
    exp = exponent(code)
    if exp == 0:
        assert "." not in digits
    else:
        assert len(digits.split(".")[1]) == exp
    assert int(digits.replace(",", "").replace(".", "")) == minor


@given(
    st.sampled_from(CURRENCIES),
    st.decimals(min_value=-(10**9), max_value=10**9, places=6, allow_nan=False),
)
def test_parsing_never_rounds(code, value):
    exp = exponent(code)
    if value == value.quantize(Decimal(1).scaleb(-exp)):
        assert parse_major(value, code).amount == value
    else:
        with pytest.raises(MoneyError):
            parse_major(value, code)


@given(st.sampled_from(CURRENCIES), st.integers(-(10**12), 10**12), st.integers(-(10**12), 10**12))
def test_arithmetic_is_exact(code, a, b):
    assert (Money(a, code) + Money(b, code)).amount_minor == a + b
    assert (Money(a, code) - Money(b, code)).amount_minor == a - b
