from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from sill.rails.models import MockLedgerEntry, RailAccount


class RailAccountForm(forms.ModelForm):
    # Write-only: the stored key is never rendered back, not even masked.
    new_secret = forms.CharField(
        label="API key",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave blank to keep the stored key.",
    )
    api_base = forms.URLField(required=False, assume_scheme="https")

    class Meta:
        model = RailAccount
        fields = ["site", "rail", "enabled", "mode", "connected_account", "api_base", "config"]

    def clean(self) -> dict[str, Any]:
        super().clean()  # Django's returns self.cleaned_data (typed as possibly None)
        cleaned = self.cleaned_data
        moved = self.instance.pk is not None and {"site", "rail"} & set(self.changed_data)
        if moved and self.instance.has_secret and not cleaned.get("new_secret"):
            # The stored key is bound to its site and rail (secrets.py): it would not decrypt
            # on the moved account, and moving a credential should be a deliberate re-entry.
            raise forms.ValidationError(
                "The stored API key belongs to this account's site and rail: enter the API "
                "key again to move the account."
            )
        return cleaned

    def save(self, commit: bool = True) -> Any:
        account = super().save(commit=False)
        if self.cleaned_data.get("new_secret"):
            account.set_secret(self.cleaned_data["new_secret"])
        if commit:
            account.save()
        return account


@admin.register(RailAccount)
class RailAccountAdmin(admin.ModelAdmin):
    form = RailAccountForm
    list_display = ["site", "rail", "enabled", "mode", "has_secret", "updated_at"]
    list_filter = ["rail", "enabled", "mode"]


@admin.register(MockLedgerEntry)
class MockLedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["provider_id", "kind", "site_id", "amount_minor", "currency", "created_at"]
    list_filter = ["kind"]
    search_fields = ["provider_id", "provider_charge_id", "idempotency_key"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
