"""The staff refund form of the order page, and the one parse of a refund's size.

:func:`parse_refund_size` turns ``kind`` plus the amount or percentage text into money; the
form (the page and its htmx preview) and the staff API both call it, so an amount is read
the same way wherever it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError

from refunds.staff.services import OrderSnapshot, RefundKind, parse_percentage, typed_text
from sill.errors import SillError
from sill.money import Money, MoneyError, NotAnAmount, exponent, parse_major

TEXT_MAX = 200
NOTE_MAX = 1000
# Longer than any amount Money holds (18 digits, a sign, a dot and 6 decimals) or any
# percentage: such text is refused as too long, in a message that does not repeat it.
FIGURE_MAX = 32


@dataclass(frozen=True)
class StaffConfirmation:
    """What a validated staff refund will do, shown before it is made (nothing moved yet).

    ``fields`` are the submitted values to post again with ``confirmed=1`` and the same
    ``idempotency_key``, so the confirmed submit is the request the user checked.
    """

    amount: Money
    explanation: str
    buyer: str
    rail: str
    sentence: str
    fields: dict[str, str]
    idempotency_key: str


@dataclass(frozen=True)
class RefundSize:
    kind: RefundKind
    amount: Money | None = None
    percentage: Decimal | None = None


def parse_money_field(text: str, currency: str, field: str) -> Money:
    """Major units of ``currency`` (``"15.00"``) → Money; a refusal names ``field``."""
    if isinstance(text, str) and len(text.strip()) > FIGURE_MAX:
        raise SillError(
            f"That amount is too long: type the {currency} amount in digits, with a dot "
            f"before any decimals (e.g. {_typed_example(currency)}).",
            code="invalid_field",
            field=field,
        )
    try:
        return parse_major(text, currency)
    except NotAnAmount:
        # "1,000.00", "1.000,00" and "$10" are how people write money; say how to type it
        # rather than guess which of a comma and a dot is the decimal point.
        raise SillError(
            f"{typed_text(text.strip())} is not a decimal amount: type it in digits with a dot "
            "for the decimals, without thousands separators and without a currency symbol "
            f"(e.g. {_typed_example(currency)}).",
            code="invalid_field",
            field=field,
        ) from None
    except MoneyError as exc:
        raise SillError(str(exc), code="invalid_field", field=field) from None


def parse_refund_size(*, kind: str, amount: Any, percentage: Any, currency: str) -> RefundSize:
    """What a staff refund asks for: everything left, a fixed amount or a percentage."""
    # Blank (a percentage's lone "%" too): asked for, not quoted back as "'' is not a ...".
    if kind == "amount" and isinstance(amount, str) and not amount.strip():
        raise SillError("Enter the amount to refund.", code="invalid_field", field="amount")
    blank_percentage = isinstance(percentage, str) and not percentage.strip().rstrip("%").strip()
    if kind == "percentage" and blank_percentage:
        raise SillError("Enter the percentage to refund.", code="invalid_field", field="percentage")
    if kind == "amount":
        return RefundSize("amount", amount=parse_money_field(amount, currency, "amount"))
    if kind == "percentage":
        return RefundSize("percentage", percentage=parse_percentage(percentage))
    if kind == "full":
        return RefundSize("full")
    raise SillError(
        "Choose a full, fixed-amount or percentage refund.", code="invalid_field", field="kind"
    )


def _typed_example(currency: str) -> str:
    """An amount as the form reads it, in ``currency``'s decimals: 1000.50, 1000, 1000.500."""
    digits = exponent(currency)
    return "1000" + ("." + "5".ljust(digits, "0") if digits else "")


class _Text(forms.Field):
    """Stripped text cut to ``limit`` characters: a long value is shortened, never an error.

    ``limit=None`` keeps it whole: an amount or a percentage is read as typed or refused, as
    cutting it could leave a different number ("10", spaces, "5" cut after the spaces is 10).
    """

    def __init__(self, *, limit: int | None = TEXT_MAX) -> None:
        super().__init__(required=False)
        self.limit = limit

    def to_python(self, value: Any) -> str:
        return str("" if value is None else value).strip()[: self.limit]


def _number(value: str) -> int | None:
    digits = value.removeprefix("-")
    # ASCII only: "²".isdigit() is True but int("²") raises, and Arabic-Indic digits read as 10.
    ok = digits.isascii() and digits.isdigit() and len(digits) <= 18
    return int(value) if ok else None


class StaffRefundForm(forms.Form):
    """The refund panel's form. ``error`` and ``notice`` are what the panel tells the user.

    Unbound, it is the default form (a full refund). ``is_valid()`` parses the size once;
    afterwards ``size`` holds it, or ``error`` the first refusal (as a ``SillError``, so the
    panel shows the same message and field as the API would).
    """

    kind = _Text()
    amount = _Text(limit=None)
    percentage = _Text(limit=None)
    reason = _Text()
    note = _Text(limit=NOTE_MAX)
    # The order as the user saw it (see refunds.staff.services.OrderSnapshot).
    expected_remaining_minor = _Text()
    expected_refund_count = _Text()
    # The amount a percentage came to when the user was shown it.
    confirmed_amount_minor = _Text()

    def __init__(self, data: Any = None, *, currency: str) -> None:
        super().__init__(data)
        self.currency = currency
        self.error: SillError | None = None
        self.notice = ""
        self.size: RefundSize | None = None
        self.confirmation: StaffConfirmation | None = None

    @property
    def values(self) -> dict[str, str]:
        """Every field as cleaned text: what the panel shows again, and the request's body for
        its idempotency fingerprint."""
        if not self.is_bound:
            return {"kind": "full"}
        # Every field is a _Text, whose to_python returns str; Form.fields is typed by the base
        # class only.
        return {
            name: cast(str, field.to_python(self.data.get(name)))
            for name, field in self.fields.items()
        }

    def clean(self) -> dict[str, Any]:
        super().clean()  # returns cleaned_data, typed as Optional by django-stubs
        data = self.cleaned_data
        try:
            self.size = parse_refund_size(
                kind=data["kind"],
                amount=data["amount"],
                percentage=data["percentage"],
                currency=self.currency,
            )
        except SillError as error:
            self.error = error
            raise ValidationError(error.message, code=error.code) from None
        return data

    def snapshot(self) -> OrderSnapshot:
        values = self.values
        return OrderSnapshot(
            remaining_minor=_number(values.get("expected_remaining_minor", "")),
            refund_count=_number(values.get("expected_refund_count", "")),
            amount_minor=_number(values.get("confirmed_amount_minor", "")),
        )
