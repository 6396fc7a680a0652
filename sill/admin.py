"""Sill's Django admin site: superusers only, and only where ``SILL_ADMIN=1`` mounts it.

The admin is an operator's tool, outside Sill's roles and sites: it sees every site's rows.
So it is off by default (sill/urls.py does not mount it: 404), and where it is on, only an
active superuser gets in; a staff user without ``is_superuser`` is refused at the login form
and on every page. Its login goes through django-axes like the product's (the same
``AUTHENTICATION_BACKENDS``). Everything about who may enter lives in this one class, so a
second factor is required here without touching the registrations: the login form asks for a
code from the superuser's authenticator (or a recovery code; sill.accounts.two_factor), and
``has_permission`` lets in only a session verified with one (``SILL_ADMIN_TWO_FACTOR``, on
unless under pytest, where tests/accounts/test_two_factor_admin.py switches it on). A
superuser sets up the authenticator on Settings → Your account.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from sill.accounts import two_factor


class SuperuserAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form, refusing anyone who is not an active superuser."""

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)  # active and staff
        if not user.is_superuser:
            # The same words as a wrong password: the form says nothing about the account.
            raise ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


class TwoFactorAuthenticationForm(SuperuserAuthenticationForm):
    """…and, with ``SILL_ADMIN_TWO_FACTOR``, a code: the session it opens is verified."""

    otp_token = forms.CharField(label="Code", required=False, max_length=32, strip=True)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        user = self.get_user()
        if settings.SILL_ADMIN_TWO_FACTOR and user is not None:
            device = two_factor.check_code(user, cleaned.get("otp_token") or "")
            if device is None:
                # A wrong code counts as a failed login for django-axes, like a wrong password.
                user_login_failed.send(
                    sender=__name__,
                    credentials={"username": user.get_username()},
                    request=self.request,
                )
                raise ValidationError(
                    "Enter a code from your authenticator app (a superuser needs one: set it "
                    "up on Settings → Your account).",
                    code="invalid_token",
                )
            # django-otp's user_logged_in receiver verifies the new session with this device.
            setattr(user, "otp_device", device)  # noqa: B010 (not a declared User attribute)
        return cleaned


class SillAdminSite(admin.AdminSite):
    site_header = "Sill administration"
    site_title = "Sill admin"
    index_title = "Operator tools"
    login_form = TwoFactorAuthenticationForm
    login_template = "admin/sill_login.html"

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        if settings.SILL_ADMIN_TWO_FACTOR and not two_factor.is_verified(request):
            return False
        return bool(user.is_active and user.is_superuser)
