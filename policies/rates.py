"""The USD rate table behind the ``…Usd`` facts. Pure and static, on purpose.

A rule such as "hold refunds over $50" must decide the same way today and when the preview
replays last month, so the rates are a fixed table in the code, changed by a commit (and
the change shows in review), never fetched at decision time. They are rough mid-market
rates: a merchant who needs a tight bound in another currency writes the rule on
``refundAmount`` and ``currency`` instead.

``RATES[code]`` is how many US dollars one major unit of ``code`` buys. Conversion works in
minor units, exactly (``Fraction``), and rounds **up** to the next US cent, so a rounding
error can only make a rule stricter. A currency missing from the table has no USD amount:
the fact is unknown, and unknown facts take a rule's restrictive branch.
"""

from __future__ import annotations

from fractions import Fraction

from sill.money import exponent

RATES_AS_OF = "2026-10-01"

RATES: dict[str, Fraction] = {
    code: Fraction(rate)
    for code, rate in {
        "USD": "1",
        "EUR": "1.08",
        "GBP": "1.27",
        "CAD": "0.73",
        "AUD": "0.66",
        "NZD": "0.60",
        "CHF": "1.13",
        "JPY": "0.0067",
        "SEK": "0.095",
        "NOK": "0.093",
        "DKK": "0.145",
        "PLN": "0.25",
        "CZK": "0.043",
        "HKD": "0.128",
        "SGD": "0.75",
        "MXN": "0.055",
        "BRL": "0.18",
        "INR": "0.012",
        "KRW": "0.00073",
        "CNY": "0.14",
        "ZAR": "0.055",
        "ILS": "0.27",
        "AED": "0.2723",
        "KWD": "3.26",
        "BHD": "2.65",
    }.items()
}


def usd_minor(amount_minor: int, currency: str) -> int | None:
    """``amount_minor`` of ``currency`` in US cents, rounded up; None without a rate."""
    rate = RATES.get(currency)
    if rate is None:
        return None
    cents = Fraction(amount_minor, 10 ** exponent(currency)) * rate * 100
    # Ceiling division on an exact fraction: never rounds a refund down past a bound.
    return -(-cents.numerator // cents.denominator)
