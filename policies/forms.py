"""The AUTO-REFUND settings form: major units in, ``Money`` out (converted once, here)."""

from __future__ import annotations

from typing import Any

from django import forms

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
