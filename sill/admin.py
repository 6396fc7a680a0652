"""Sill's Django admin site: superusers only, and only where ``SILL_ADMIN=1`` mounts it.

The admin is an operator's tool, outside Sill's roles and sites: it sees every site's rows.
So it is off by default (sill/urls.py does not mount it: 404), and where it is on, only an
active superuser gets in; a staff user without ``is_superuser`` is refused at the login form
and on every page. Its login goes through django-axes like the product's (the same
``AUTHENTICATION_BACKENDS``). Everything about who may enter lives in this one class, so a
second factor can be required here (``has_permission``) without touching the registrations.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest


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


class SillAdminSite(admin.AdminSite):
    site_header = "Sill administration"
    site_title = "Sill admin"
    index_title = "Operator tools"
    login_form = SuperuserAuthenticationForm

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_superuser)
