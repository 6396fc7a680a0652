"""``parse_major`` reads plain ASCII decimals only, and refuses extreme ``Decimal`` values.

Issue 9, defect 4 at the money edge: ``\\d`` and ``Decimal()`` both accept any Unicode decimal
digit, so ``parse_major("\\u0661\\u0660", "USD")`` was $10.00 for every caller.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from sill.money import Money, MoneyError, parse_major

# A "10" in Arabic-Indic, Extended Arabic-Indic, Devanagari, fullwidth and Bengali digits, a
# "10.00" in Arabic-Indic digits, and mixes with ASCII.
FOREIGN_TENS = [
    "\u0661\u0660",
    "\u06f1\u06f0",
    "\u0967\u0966",
    "\uff11\uff10",
    "\u09e7\u09e6",
    "\u0661\u0660.\u0660\u0660",
    "1\u0660",
    "10.\uff10\uff10",
]


@pytest.mark.parametrize("text", FOREIGN_TENS)
@pytest.mark.parametrize("currency", ["USD", "JPY", "KWD"])
def test_it_refuses_non_ascii_digits(text, currency):
    with pytest.raises(MoneyError, match="is not a decimal amount"):
        parse_major(text, currency)


@pytest.mark.parametrize(
    "text", ["1_000", "²", "1²", " 1 0 ", "+10", "1e3", "0x10", ".", "-.", "1..5"]
)
def test_it_refuses_other_spellings_decimal_would_read(text):
    with pytest.raises(MoneyError):
        parse_major(text, "USD")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Decimal("1e999999"), "too large"),
        (Decimal("1e18"), "too large"),
        (Decimal("1e-999999999"), "at most 2 decimal"),
        (Decimal("1e-3"), "at most 2 decimal"),
        # 30 and more digits: scaleb() rounded them to 28 and read $1.00.
        (Decimal("1." + "0" * 40 + "1"), "at most 2 decimal"),
        (Decimal("-1." + "0" * 26 + "1"), "at most 2 decimal"),
        ("12345678901234567890", r"too large: USD amounts are at most \$9,999,999,999,999,999\.99"),
        ("-" + "9" * 40, "too large"),
        ("1." + "0" * 40 + "1", "at most 2 decimal"),
    ],
)
def test_it_refuses_extreme_decimals_instead_of_overflowing_or_rounding(value, message):
    with pytest.raises(MoneyError, match=message):
        parse_major(value, "USD")


def test_ascii_amounts_still_parse():
    assert parse_major(" 10.00 ", "USD") == Money(1000, "USD")
    assert parse_major("10", "JPY") == Money(10, "JPY")
    assert parse_major(Decimal("0E+5"), "USD") == Money(0, "USD")
    assert parse_major(Decimal("1." + "0" * 40), "USD") == Money(100, "USD")
    assert parse_major(Decimal("12345678901234567." + "0" * 30), "JPY") == Money(
        12345678901234567, "JPY"
    )


@pytest.mark.parametrize(
    ("text", "currency", "minor"),
    [(".50", "USD", 50), ("10.", "USD", 1000), ("-.5", "USD", -50), ("100.", "JPY", 100)],
)
def test_a_leading_or_trailing_dot_is_read_as_typed(text, currency, minor):
    """Typed ".50" and "10." were refused as "not a decimal amount", advice they follow."""
    assert parse_major(text, currency) == Money(minor, currency)
