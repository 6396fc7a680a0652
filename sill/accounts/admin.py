"""The Django admin's pages for accounts and authenticators, signed like Sill's own.

A superuser there can switch an account off, make it staff or superuser, change its login
name or email (where a password reset is sent), set its password, delete it (and with it its
memberships), or delete its authenticator: each changes who may sign in to the sites the
account belongs to, as a member removed or ``manage.py two_factor reset`` does. So each
writes the ``member_change`` record those write, on every site of the account, in the same
transaction, naming the superuser and ``via: "django_admin"``
(:func:`sill.accounts.admin_audit.record_own_account_change`); making an account superuser, or
no longer one, on every site, member or not (a superuser's admin edits every site). A save that
changes none of it records nothing.

Authenticators and recovery codes are listed and may be deleted (recorded), never added or
changed here: a device planted with a key the superuser chose, or a key read off its page,
would be that member's second factor in the superuser's hands. Members enrol on Settings →
Your account; ``OTP_ADMIN_HIDE_SENSITIVE_DATA`` keeps keys, QR codes and codes off the pages.

Sessions have no pages here: django-qsessions' listed each by its key (the row's primary key),
which signs in as that member, second factor and all. Members end their own on Your account;
an account switched off here (recorded) loses every one.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django_otp.plugins.otp_static.admin import StaticDeviceAdmin
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.admin import TOTPDeviceAdmin
from django_otp.plugins.otp_totp.models import TOTPDevice
from qsessions.models import Session

from sill.accounts.admin_audit import (
    record_account_change,
    record_account_change_everywhere,
    record_own_account_change,
)

User = get_user_model()
VIA = "django_admin"
# The account's columns that decide whether and how far it may sign in.
ACCESS = ("is_active", "is_staff", "is_superuser")
# …and who it is: the login name, and the address a password reset is sent to (a superuser who
# pointed it at their own could reset the password, recorded as the member's own reset).
IDENTITY = ("username", "email")


class AuditedUserAdmin(UserAdmin):
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            before = (
                User.objects.select_for_update()
                .filter(pk=obj.pk)
                .values(*IDENTITY, *ACCESS)
                .first()
                if change
                else None
            )
            super().save_model(request, obj, form, change)
            if before is None:
                return  # a new account belongs to no site yet
            changed = [name for name in (*IDENTITY, *ACCESS) if before[name] != getattr(obj, name)]
            if changed:
                now = {name: getattr(obj, name) for name in ACCESS}
                for name in IDENTITY:
                    if name in changed:
                        now |= {name: getattr(obj, name), f"{name}_before": before[name]}
                # A superuser's admin edits every site: each site's log says who became one.
                record = (
                    record_account_change_everywhere
                    if "is_superuser" in changed
                    else record_own_account_change
                )
                record(obj, "account_change", actor=request.user, via=VIA, changed=changed, **now)

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        with transaction.atomic():
            user = self.get_object(request, unquote(id))
            before = user.password if user is not None else None
            response = super().user_change_password(request, id, form_url)
            if user is not None:
                user.refresh_from_db(fields=["password"])
                if user.password != before:
                    record_account_change(user, "password_set", actor=request.user, via=VIA)
        return response

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            # Before the delete: it takes the memberships the records are written for.
            record_own_account_change(obj, "remove", actor=request.user, via=VIA)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            for user in queryset:
                record_own_account_change(user, "remove", actor=request.user, via=VIA)
            super().delete_queryset(request, queryset)


class _AuditedDeviceDeletes(admin.ModelAdmin):
    """An authenticator or recovery codes deleted: ``two_factor_removed``, naming the device.
    Neither added nor changed here (the module docstring)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            _removed(request, obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            for device in queryset.select_related("user"):
                _removed(request, device)
            super().delete_queryset(request, queryset)


def _removed(request: HttpRequest, device: Any) -> None:
    record_account_change(
        device.user,
        "two_factor_removed",
        actor=request.user,
        via=VIA,
        device=device.persistent_id,
    )


class AuditedTOTPDeviceAdmin(_AuditedDeviceDeletes, TOTPDeviceAdmin):
    pass


class AuditedStaticDeviceAdmin(_AuditedDeviceDeletes, StaticDeviceAdmin):
    pass


# django.contrib.auth, qsessions and django_otp register theirs first (INSTALLED_APPS order).
if admin.site.is_registered(Session):
    admin.site.unregister(Session)
for model, model_admin in (
    (User, AuditedUserAdmin),
    (TOTPDevice, AuditedTOTPDeviceAdmin),
    (StaticDevice, AuditedStaticDeviceAdmin),
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
