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


class ShopifyForm(forms.Form):
    shop_domain = forms.CharField(label="Store domain", max_length=255, strip=True)
    # Write-only, like the Stripe key: never rendered back.
    access_token = forms.CharField(
        label="Admin API access token",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )
    webhook_secrets = forms.CharField(
        label="Webhook signing secret", required=False, max_length=4000, strip=True
    )
    api_base = forms.CharField(label="API address override", required=False, max_length=255)


class WooCommerceForm(forms.Form):
    store_url = forms.CharField(label="Store address", max_length=255, strip=True)
    # Write-only, like the Stripe key: never rendered back.
    consumer_key = forms.CharField(
        label="Consumer key",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )
    consumer_secret = forms.CharField(
        label="Consumer secret",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )
    webhook_secret = forms.CharField(
        label="Webhook secret",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )


class PayPalForm(forms.Form):
    client_id = forms.CharField(label="Client id", max_length=255, strip=True)
    # Write-only: never rendered back.
    client_secret = forms.CharField(
        label="Client secret",
        required=False,
        max_length=255,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )
    mode = forms.ChoiceField(
        label="Mode",
        choices=[(RailMode.TEST, "Sandbox"), (RailMode.LIVE, "Live")],
        initial=RailMode.TEST,
    )
    webhook_id = forms.CharField(label="Webhook id", required=False, max_length=64, strip=True)
    api_base = forms.CharField(label="API address override", required=False, max_length=255)
