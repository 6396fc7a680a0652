"""Input of Settings → Rails. Checks that need the stored account live in services.py."""

from __future__ import annotations

from django import forms

from sill.rails.models import RailMode


class StripeForm(forms.Form):
    # Write-only: the stored key is never rendered back (render_value=False), not even masked.
    secret_key = forms.CharField(
        label="Secret key",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(
            render_value=False,
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "sk_test_…"},
        ),
    )
    # Write-only too: the endpoint's signing secrets, one per line (several while rotating).
    webhook_secrets = forms.CharField(
        label="Webhook signing secrets",
        required=False,
        max_length=4000,
        strip=True,
        widget=forms.Textarea(attrs={"autocomplete": "off", "spellcheck": "false", "rows": 2}),
    )
    mode = forms.ChoiceField(label="Mode", choices=RailMode.choices, initial=RailMode.TEST)
    connected_account = forms.CharField(
        label="Connected account",
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"placeholder": "acct_… (Stripe Connect only)"}),
    )
    api_base = forms.CharField(
        label="API address override",
        required=False,
        max_length=255,
        widget=forms.TextInput(attrs={"placeholder": "http://127.0.0.1:8420"}),
    )


class EnabledForm(forms.Form):
    enabled = forms.TypedChoiceField(choices=[("1", "on"), ("0", "off")], coerce=lambda v: v == "1")
