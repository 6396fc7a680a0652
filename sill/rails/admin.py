"""The Django admin's rail screens (mounted only with SILL_ADMIN=1, superusers only).

The rail account form takes the same credentials as Settings → Rails and holds them to the
same checks, with the rails page's own guards (sill/rails/services.py): the API address
override only with DEBUG on and only http(s); a Stripe key that looks like one and matches
the mode; live mode only with SILL_ALLOW_LIVE=1; no rail switched on without its credential.
Only a Stripe key can be entered here: the other rails' credentials are checked with their
provider by the rails page (a Shopify token's scopes, a PayPal app's token); WooCommerce is
switched on only beside a keyed, switched-on Stripe rail, as there, and a store's address is
not changed here to another store's while the account holds a webhook secret: another store
needs its own, which only the rails page takes (woocommerce.connect.check_store_webhook_secret,
the rule both apply).

A save that changes what decides which Stripe account the key acts on (the key, mode, Connect
account, address, site or rail) forgets the account named before and asks Stripe again on
commit, as the rails page does (sill.rails.payment_account).

Every save and delete here writes the signed ``rail_change`` record the rails page writes, in
the same transaction (``via``: ``django_admin``), naming the fields that changed and never a
secret; a save that changed nothing records nothing. An account moved to another site or rail
is recorded on both sites.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from sill.accounts.admin_audit import record_admin_change
from sill.accounts.models import Site
from sill.errors import SillError
from sill.orders.models import Rail
from sill.queue import enqueue_on_commit
from sill.rails.left_behind import PAYMENT_ACCOUNT_RAILS
from sill.rails.models import MockLedgerEntry, RailAccount, RailMode
from sill.rails.services import (
    _CONNECTED_ACCOUNT_RE,
    CONFIGURABLE_RAILS,
    RailSettingsError,
    _check_api_base,
    _check_key,
    _check_woocommerce_can_refund,
)
from sill.rails.woocommerce.connect import check_store_webhook_secret
from sill.rails.woocommerce.orders import same_store

# The rails page's field names (in its errors) → this form's.
_FIELDS = {"secret_key": "new_secret", "access_token": "new_secret"}


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
        try:
            self._check_like_the_rails_page(cleaned, moved=bool(moved))
        except SillError as error:
            field = _FIELDS.get(error.field or "", error.field)
            self.add_error(field if field in self.fields else None, error.message)
        return cleaned

    def _check_like_the_rails_page(self, cleaned: dict[str, Any], *, moved: bool) -> None:
        rail, mode = cleaned.get("rail"), cleaned.get("mode")
        secret = (cleaned.get("new_secret") or "").strip()
        if "api_base" in self.changed_data:
            # The page only takes the override with DEBUG on; an unchanged value is left
            # alone, as the page leaves it when it does not show the field.
            cleaned["api_base"] = _check_api_base((cleaned.get("api_base") or "").strip())
        if cleaned.get("enabled") and rail not in CONFIGURABLE_RAILS:
            raise RailSettingsError("That rail is not available yet.", field="rail")
        if secret and rail != Rail.STRIPE:
            raise RailSettingsError(
                "Connect this rail on Settings → Rails, which checks its credential with the "
                "provider; only a Stripe key can be entered here.",
                field="secret_key",
            )
        if mode == RailMode.LIVE and not settings.SILL_ALLOW_LIVE:
            raise RailSettingsError(
                "Live mode is switched off on this deployment: Sill moves no real money unless "
                "it runs with SILL_ALLOW_LIVE=1.",
                code="live_not_allowed",
                field="mode",
            )
        stored = self.instance.has_secret and not moved
        if cleaned.get("enabled") and rail not in (Rail.MOCK, Rail.STRIPE) and not stored:
            # The rails page switches no provider rail on before its credential is saved.
            raise RailSettingsError(
                "Connect this rail on Settings → Rails with its credential before switching it on.",
                field="enabled",
            )
        if cleaned.get("enabled") and rail == Rail.WOOCOMMERCE and cleaned.get("site"):
            _check_woocommerce_can_refund(cleaned["site"], self.instance)
        if rail == Rail.WOOCOMMERCE and self.instance.pk is not None and not moved:
            try:
                check_store_webhook_secret(
                    self.instance,
                    url=(cleaned.get("connected_account") or "").strip(),
                    webhook_secret="",
                )
            except RailSettingsError as error:
                # This form takes no webhook secret: the rails page does.
                raise RailSettingsError(
                    f"{error.message} Connect another store on Settings → Rails, with its "
                    "webhook's own secret.",
                    field="connected_account",
                ) from error
            url = (cleaned.get("connected_account") or "").strip()
            before = self.instance.connected_account
            if self.instance.has_secret and before and not same_store(url, before):
                # As the rails page refuses (configure_woocommerce): the saved consumer key
                # and secret are the first store's, and this form takes no others.
                raise RailSettingsError(
                    f"Enter the consumer key and secret of {url}: the saved consumer key and "
                    f"secret belong to {before}. Connect another store on Settings → Rails, "
                    "with its own keys and webhook secret.",
                    field="connected_account",
                )
        if rail != Rail.STRIPE:
            return
        if secret:
            _check_key(secret)
        connected = (cleaned.get("connected_account") or "").strip()
        if connected and not _CONNECTED_ACCOUNT_RE.match(connected):
            raise RailSettingsError(
                "A connected account id looks like acct_1A2b3C…; leave it empty if you don't "
                "use Stripe Connect.",
                field="connected_account",
            )
        effective = secret or (self.instance.get_secret() if stored else "")
        if cleaned.get("enabled") and not effective:
            raise RailSettingsError(
                "Save a Stripe secret key before switching the Stripe rail on.",
                field="secret_key",
            )
        if effective and ("_live_" in effective[:8]) != (mode == RailMode.LIVE):
            kind = "live" if "_live_" in effective[:8] else "test"
            raise RailSettingsError(
                f"The key is a {kind} key ({effective[:8]}…) but the mode is {mode}: a live "
                "key needs live mode and a test key needs test mode.",
                field="secret_key" if secret else "mode",
            )

    def save(self, commit: bool = True) -> Any:
        account = super().save(commit=False)
        if self.cleaned_data.get("new_secret"):
            account.set_secret(self.cleaned_data["new_secret"])
        if commit:
            account.save()
        return account


# The stored columns a save here can change, compared before and after it (what the signed
# record names: the key only as "new_key", never its value).
_COMPARED = (
    "site_id", "rail", "enabled", "mode", "connected_account", "api_base", "config",
    "secret_encrypted",
)  # fmt: skip
_SHOWN = {"site_id": "site", "secret_encrypted": "new_key"}
# What decides which Stripe account the saved key, or which PayPal merchant account the saved
# app, acts on (sill.rails.payment_account): another key, mode, Connect account, address or
# PayPal client id (in config) may be another account's, and an account moved to another site
# or rail is that one's to name. As the rails page does (services.configure_stripe,
# paypal.connect.configure_paypal).
_NAMES_THE_ACCOUNT = (
    "site_id", "rail", "mode", "connected_account", "api_base", "secret_encrypted", "config",
)  # fmt: skip


@admin.register(RailAccount)
class RailAccountAdmin(admin.ModelAdmin):
    form = RailAccountForm
    list_display = ["site", "rail", "enabled", "mode", "has_secret", "updated_at"]
    list_filter = ["rail", "enabled", "mode"]

    def save_model(
        self, request: HttpRequest, obj: RailAccount, form: forms.ModelForm, change: bool
    ) -> None:
        with transaction.atomic():
            stored = (
                RailAccount.objects.select_for_update().filter(pk=obj.pk).values(*_COMPARED).first()
                if change
                else None
            )
            relearn = stored is None or any(
                stored[name] != getattr(obj, name) for name in _NAMES_THE_ACCOUNT
            )
            if relearn:
                # Unknown until Stripe or PayPal names it, after this commits: charges taken
                # meanwhile record no account rather than the earlier credentials'.
                obj.payment_account = ""
            super().save_model(request, obj, form, change)
            if relearn and obj.rail in PAYMENT_ACCOUNT_RAILS and obj.has_secret:
                enqueue_on_commit(
                    "rails.learn_payment_account",
                    obj.pk,
                    recovered_by="rails.learn_payment_accounts",
                )
            before = stored or {}
            changed = sorted(
                _SHOWN.get(name, name)
                for name in _COMPARED
                if stored is None or before[name] != getattr(obj, name)
            )
            if change and not changed:
                return  # saved as it was: nothing to record
            body = {
                "rail": obj.rail,
                "action": "update" if change else "connect",
                "via": "django_admin",
                "changed": changed,
                "enabled": obj.enabled,
                "mode": obj.mode,
                "mode_before": before.get("mode"),
                "new_key": "new_key" in changed and bool(obj.secret_encrypted),
                "connected_account": obj.connected_account,
            }
            record_admin_change(site=obj.site, kind="rail_change", actor=request.user, body=body)
            moved_from = before.get("site_id")
            if moved_from is not None and moved_from != obj.site_id:
                record_admin_change(
                    site=Site.objects.get(pk=moved_from),
                    kind="rail_change",
                    actor=request.user,
                    body={**body, "action": "move_away", "moved_to": obj.site_id},
                )

    def delete_model(self, request: HttpRequest, obj: RailAccount) -> None:
        with transaction.atomic():
            _record_delete(request, obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RailAccount]) -> None:
        with transaction.atomic():
            for account in queryset.select_related("site").select_for_update(of=("self",)):
                _record_delete(request, account)
            super().delete_queryset(request, queryset)


def _record_delete(request: HttpRequest, account: RailAccount) -> None:
    record_admin_change(
        site=account.site,
        kind="rail_change",
        actor=request.user,
        body={
            "rail": account.rail,
            "action": "delete",
            "via": "django_admin",
            "enabled": account.enabled,
            "mode": account.mode,
            "connected_account": account.connected_account,
        },
    )


@admin.register(MockLedgerEntry)
class MockLedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["provider_id", "kind", "site_id", "amount_minor", "currency", "created_at"]
    list_filter = ["kind"]
    search_fields = ["provider_id", "provider_charge_id", "idempotency_key"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
