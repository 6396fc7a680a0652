"""Money in integer minor units with ISO 4217 exponents.

Everything below the edges (forms, mandates, provider payloads) is a ``Money``: an integer
count of the currency's minor unit plus its code. Major units (``"89.00"``) are converted
exactly once, at the edge, by :func:`parse_major`, which refuses more decimals than the
currency has rather than rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal, Inexact, InvalidOperation

# ISO 4217 minor-unit exponents that differ from 2. Every other well-formed code has 2.
_EXPONENTS: dict[str, int] = {
    # zero-decimal
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0,
    "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0,
    "XPF": 0,
    # three-decimal
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    # four-decimal
    "CLF": 4, "UYW": 4,
}  # fmt: skip

# Currencies Sill knows. A code outside this set is refused at the edge.
KNOWN_CURRENCIES: frozenset[str] = frozenset(
    {
        "AED", "ARS", "AUD", "BRL", "CAD", "CHF", "CNY", "COP", "CZK", "DKK", "EGP", "EUR",
        "GBP", "HKD", "HUF", "IDR", "ILS", "INR", "MXN", "MYR", "NGN", "NOK", "NZD", "PEN",
        "PHP", "PKR", "PLN", "RON", "SAR", "SEK", "SGD", "THB", "TRY", "TWD", "UAH", "USD",
        "ZAR",
    }
    | set(_EXPONENTS)
)  # fmt: skip

_SYMBOLS: dict[str, str] = {
    "USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "KRW": "₩", "INR": "₹",
    "CAD": "CA$", "AUD": "A$", "NZD": "NZ$", "HKD": "HK$", "SGD": "S$", "MXN": "MX$",
    "BRL": "R$", "CHF": "CHF ", "CNY": "CN¥",
}  # fmt: skip

_CODE_RE = re.compile(r"^[A-Z]{3}$")
# A plain decimal in ASCII digits (amounts here, percentages in the staff form). A dot may lead
# (".50") or end ("10."): how people type them, and exact. How many digits is left to the
# reader's checks, so that twenty digits are refused as too large and seven
# decimals as too many, in those words.
PLAIN_DECIMAL_RE = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


class MoneyError(ValueError):
    """An amount or currency that cannot be represented exactly."""


class NotAnAmount(MoneyError):
    """Text that is not a plain decimal number at all (``"1,000.00"``, ``"$10"``, ``"1e3"``),
    as opposed to a number the currency cannot hold: a form can say how to type it."""


def _too_many_decimals(code: str, exp: int) -> MoneyError:
    if exp == 0:
        return MoneyError(f"{code} amounts are whole numbers, without decimals")
    return MoneyError(f"{code} amounts have at most {exp} decimal place(s)")


def _too_large(code: str) -> MoneyError:
    largest = format_money(Money(_MINOR_LIMIT - 1, code))
    return MoneyError(f"That amount is too large: {code} amounts are at most {largest}")


def exponent(currency: str) -> int:
    """Number of decimals of ``currency``'s minor unit (JPY 0, USD 2, KWD 3)."""
    return _EXPONENTS.get(normalize_currency(currency), 2)


def normalize_currency(currency: str) -> str:
    if type(currency) is str and currency in KNOWN_CURRENCIES:
        return currency  # the common case (every Money is built through here): no regex
    if not isinstance(currency, str) or not _CODE_RE.match(currency.upper()):
        raise MoneyError(f"{currency!r} is not a 3-letter ISO 4217 currency code")
    code = currency.upper()
    if code not in KNOWN_CURRENCIES:
        raise MoneyError(f"{code} is not a supported currency")
    return code


@dataclass(frozen=True, slots=True)
class Money:
    amount_minor: int
    currency: str

    def __post_init__(self) -> None:
        if isinstance(self.amount_minor, bool) or not isinstance(self.amount_minor, int):
            raise MoneyError("amount_minor must be an int")
        code = normalize_currency(self.currency)
        if code != self.currency:
            object.__setattr__(self, "currency", code)

    @classmethod
    def zero(cls, currency: str) -> Money:
        return cls(0, currency)

    @property
    def exponent(self) -> int:
        return exponent(self.currency)

    @property
    def amount(self) -> Decimal:
        """The amount in major units, exact (``Decimal('89.00')``)."""
        return (
            Decimal(self.amount_minor)
            .scaleb(-self.exponent)
            .quantize(Decimal(1).scaleb(-self.exponent))
        )

    def major_str(self) -> str:
        """Major units as plain text with the currency's decimals (``"89.00"``, ``"1200"``)."""
        return f"{self.amount:f}"

    def _check(self, other: object) -> Money:
        if not isinstance(other, Money):
            raise TypeError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise MoneyError(f"cannot combine {self.currency} with {other.currency}")
        return other

    def __add__(self, other: Money) -> Money:
        return Money(self.amount_minor + self._check(other).amount_minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        return Money(self.amount_minor - self._check(other).amount_minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount_minor, self.currency)

    def __lt__(self, other: Money) -> bool:
        return self.amount_minor < self._check(other).amount_minor

    def __le__(self, other: Money) -> bool:
        return self.amount_minor <= self._check(other).amount_minor

    def __gt__(self, other: Money) -> bool:
        return self.amount_minor > self._check(other).amount_minor

    def __ge__(self, other: Money) -> bool:
        return self.amount_minor >= self._check(other).amount_minor

    def __bool__(self) -> bool:
        return self.amount_minor != 0

    def __str__(self) -> str:
        return format_money(self)


def min_money(a: Money, b: Money) -> Money:
    return a if a <= b else b


# The most minor units Sill records: every amount it takes from a rail is written into signed
# audit records, whose integers JCS writes exactly only up to 2**53 - 1 (audit.chain).
MAX_RECORDABLE_MINOR = 2**53 - 1


def recordable(money: Money) -> Money:
    """``money`` when a signed record can hold it; ``MoneyError`` for more than
    :data:`MAX_RECORDABLE_MINOR` either way. A rail's amount past it (parse_major takes up
    to 10**18 - 1) failed the record's write: a sync stopped there, a webhook was retried
    until given up."""
    if abs(money.amount_minor) > MAX_RECORDABLE_MINOR:
        largest = Money(MAX_RECORDABLE_MINOR, money.currency)
        raise MoneyError(f"amount is larger than the {format_money(largest)} Sill can record")
    return money


_FLOAT_TYPES = (bool, float)
# scaleb() rounds to the context's 28 digits: Decimal("1.000…0001") (30 digits and more) scaled
# to cents came out as 100 and was read as $1.00. Trapping Inexact refuses it instead; digits
# lost that are zeros (Decimal("1.000…000")) raise nothing, as the value is exact.
_EXACT = Context(traps=[Inexact])
_MINOR_LIMIT = 10**18  # |amount_minor| stays below it


def parse_major(value: Decimal | str | int, currency: str) -> Money:
    """Convert major units to ``Money`` exactly; refuse what the currency cannot hold.

    ``parse_major("89.00", "USD") == Money(8900, "USD")``; ``"1.001"`` USD and ``"1.5"`` JPY
    raise ``MoneyError``, and so does text that is not plain ASCII digits (``"\\u0661\\u0660"``,
    ``"1e3"``, ``"1_000"``). Floats are refused: read JSON with ``parse_float=Decimal``.
    """
    code = normalize_currency(currency)
    if isinstance(value, Decimal):  # the common case (a JSON amount), tested first
        dec = value
    elif isinstance(value, _FLOAT_TYPES):
        raise MoneyError("amounts must be decimal strings or Decimal, never float")
    elif isinstance(value, str):
        text = value.strip()
        # ASCII digits only: ``\d`` and ``Decimal()`` also read Arabic-Indic or fullwidth digits.
        if not PLAIN_DECIMAL_RE.fullmatch(text):
            raise NotAnAmount(f"{value!r} is not a decimal amount")
        try:
            dec = Decimal(text)
        except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
            raise MoneyError(f"{value!r} is not a decimal amount") from exc
    elif isinstance(value, int):
        dec = Decimal(value)
    else:
        raise MoneyError(f"cannot read an amount from {type(value).__name__}")
    if not dec.is_finite():
        raise MoneyError("amount must be finite")
    exp = _EXPONENTS.get(code, 2)  # exponent(code), without normalising code again
    # Both refused before scaleb(), which overflows the decimal context on Decimal("1e999999")
    # and silently rounds Decimal("1e-999999999") to zero.
    if dec:
        adjusted = dec.adjusted()
        if adjusted >= 18:
            raise _too_large(code)
        if adjusted < -exp:
            raise _too_many_decimals(code, exp)
    try:
        scaled = dec.scaleb(exp, _EXACT)
    except Inexact:
        raise _too_many_decimals(code, exp) from None
    minor = int(scaled)  # truncated: equal to scaled exactly when scaled is a whole number
    if scaled != minor:
        raise _too_many_decimals(code, exp)
    if abs(minor) >= _MINOR_LIMIT:
        raise _too_large(code)
    return Money(minor, code)


def format_money(money: Money) -> str:
    """Human formatting per currency: ``$89.00``, ``€12.50``, ``¥1,200``, ``KWD 1.250``."""
    exp = money.exponent
    sign = "-" if money.amount_minor < 0 else ""
    number = f"{abs(money.amount):,.{exp}f}"
    symbol = _SYMBOLS.get(money.currency)
    if symbol is None:
        return f"{sign}{money.currency} {number}"
    return f"{sign}{symbol}{number}"
