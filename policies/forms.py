"""The rules page's forms: AUTO-REFUND (major units in, ``Money`` out, converted once, here)
and a protected-refund rule of the merchant's own."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms

from policies.rules import ACTION_LABELS
from policies.vocabulary import FACTS, NUMERIC_KINDS, FactSpec
from sill.money import KNOWN_CURRENCIES, Money, MoneyError, parse_major


class AutoRefundForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Auto-approve refunds under cap")
    cap = forms.CharField(
        max_length=24,
        label="Maximum auto-approve amount",
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"}),
    )
    currency = forms.ChoiceField(choices=[(c, c) for c in sorted(KNOWN_CURRENCIES)])

    def clean(self) -> dict[str, Any]:
        super().clean()  # Django's returns self.cleaned_data (typed as possibly None)
        data = self.cleaned_data
        cap, currency = data.get("cap"), data.get("currency")
        if cap is None or currency is None:
            return data
        try:
            money = parse_major(cap.replace(",", "").strip(), currency)
        except MoneyError as exc:
            self.add_error("cap", f"Enter an amount such as 25.00 ({exc}).")
            return data
        if money.amount_minor < 0:
            self.add_error("cap", "The cap cannot be negative.")
        elif data.get("enabled") and money.amount_minor == 0:
            self.add_error("cap", "Set a cap above zero to switch auto-refund on.")
        data["cap_money"] = money
        return data

    @property
    def cap_money(self) -> Money:
        money: Money = self.cleaned_data["cap_money"]
        return money


# The "Protected refunds" form: one condition per rule, in the words a merchant uses.
COMPARISONS: tuple[tuple[str, str], ...] = (
    ("gte", "is at least"),
    ("gt", "is more than"),
    ("lte", "is at most"),
    ("lt", "is less than"),
    ("eq", "is"),
    ("in", "is one of"),
)
PROTECT_ACTIONS: tuple[tuple[str, str], ...] = tuple(
    (action, ACTION_LABELS[action]) for action in ("require_approval", "deny")
)


class ProtectedRefundForm(forms.Form):
    """One fact, how it compares, one value; then hold or deny. ``rule`` is the engine's rule.

    Values are typed as merchants think of them: the share refunded as a percentage from 0 to
    100, money in US dollars (the …Usd facts, which compare refunds in every currency), days
    and counts as whole numbers, yes/no, and comma-separated lists for "is one of". The rule
    itself is validated by the engine (policies.rules) when it is added.
    """

    fact = forms.ChoiceField(label="When")
    comparison = forms.ChoiceField(choices=COMPARISONS, label="Compares")
    value = forms.CharField(max_length=200, label="Value")
    action = forms.ChoiceField(choices=PROTECT_ACTIONS, label="Then")
    name = forms.CharField(
        max_length=64, required=False, label="Name (optional)", help_text="e.g. big-refunds"
    )
    observe = forms.BooleanField(required=False, label="Observe only (log, do not act)")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fact_field = self.fields["fact"]
        assert isinstance(fact_field, forms.ChoiceField)
        # Not refundAmount: it counts minor units of each refund's own currency (10000 is
        # $100.00 and ¥10,000), so no value typed here can bound it for every refund; Refund
        # amount in USD compares every currency (policies.warnings flags such rules).
        fact_field.choices = [
            (spec.name, spec.label) for spec in FACTS.values() if spec.kind != "amount"
        ]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        fact, comparison, raw = data.get("fact"), data.get("comparison"), data.get("value")
        if not fact or not comparison or raw is None:
            return data
        spec = FACTS[fact]
        try:
            if comparison == "in":
                values = [
                    self._value(spec, part.strip()) for part in raw.split(",") if part.strip()
                ]
                if not values:
                    raise ValueError("Give at least one value, separated by commas.")
                condition: Any = values
            elif comparison == "eq":
                condition = self._value(spec, raw.strip())
            else:
                if spec.kind not in NUMERIC_KINDS:
                    raise ValueError(f"{spec.label} is not a number: use “is” or “is one of”.")
                condition = {comparison: self._value(spec, raw.strip())}
        except (ValueError, MoneyError) as exc:
            self.add_error("value", str(exc))
            return data
        rule: dict[str, Any] = {
            "when": {fact: condition},
            "then": {"action": data["action"]},
            "mode": "observe" if data.get("observe") else "enforced",
        }
        if data.get("name"):
            rule["id"] = data["name"].strip()
        data["rule"] = rule
        return data

    def _value(self, spec: FactSpec, text: str) -> Any:
        if spec.kind == "ratio":
            percent = _decimal(text.rstrip("% "), "a percentage such as 50")
            if not 0 <= percent <= 100:
                raise ValueError("The share is a percentage from 0 to 100.")
            return percent / 100
        if spec.kind == "usd":
            return parse_major(text.lstrip("$").replace(",", ""), "USD").amount_minor
        if spec.kind in ("days", "count"):
            number = _decimal(text, "a whole number")
            if number.adjusted() >= _MAX_DIGITS:
                # Refused before int(): int(Decimal("1e999999")) takes most of a minute of CPU.
                raise ValueError("That number is too large.")
            if number != int(number):
                raise ValueError("Give a whole number.")
            return int(number)
        if spec.kind == "bool":
            answer = text.lower()
            if answer not in ("yes", "no", "true", "false"):
                raise ValueError("Answer yes or no.")
            return answer in ("yes", "true")
        if not text:
            raise ValueError("Give a value.")
        return text


# Days and counts in a rule are below 10**15 (policies.rules): at most 15 digits.
_MAX_DIGITS = 15


def _decimal(text: str, what: str) -> Decimal:
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        raise ValueError(f"Enter {what}.") from None
    if not number.is_finite():
        raise ValueError(f"Enter {what}.")
    return number
