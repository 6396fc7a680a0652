"""Password reset by email: Django's ``PasswordResetView`` family with Sill's pages.

Contracts:

- The answer is the same whether or not the address has an account ("check your email").
- The emailed link is built from ``SILL_BASE_URL``, never from the request's Host header,
  and works once, for ``PASSWORD_RESET_TIMEOUT`` seconds (Django's token: it changes as soon
  as the password does).
- An account without a usable password yet (an operator added it without one) may use it
  too: the email proves the address, as an invitation would.
- Setting the new password ends every session of that user (the ``pre_save`` receiver of
  :mod:`sill.accounts.sessions`); nobody is signed in by the reset itself.
- Requests are counted per client address (``SILL_PASSWORD_RESET_ADDRESS_PER_HOUR``, 429
  with ``Retry-After`` over it) and per mailbox asked about (``SILL_PASSWORD_RESET_PER_HOUR``:
  over it the page answers as always and sends nothing, so a mailbox cannot be flooded and the
  answer says nothing).
"""

from __future__ import annotations

import math
import time
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordResetForm
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy

from sill.accounts.admin_audit import record_own_account_change
from sill.accounts.sessions import describe_duration
from sill.client_address import client_address

WINDOW_SECONDS = 3600


def _per_hour() -> int:
    return int(settings.SILL_PASSWORD_RESET_PER_HOUR)


def _per_address_per_hour() -> int:
    return int(settings.SILL_PASSWORD_RESET_ADDRESS_PER_HOUR)


def _minutes_text() -> str:
    return describe_duration(int(settings.PASSWORD_RESET_TIMEOUT))


class SillPasswordResetForm(PasswordResetForm):
    """Finds the account by its login name (the email) as well as its email field, includes
    accounts without a usable password, and never consults the request for the link."""

    def get_users(self, email: str) -> Any:
        users = get_user_model()._default_manager.filter(
            Q(email__iexact=email) | Q(username__iexact=email), is_active=True
        )
        for user in users.distinct():
            if not user.email:
                # The login name is the address (an account made before emails were kept):
                # send there. In memory only; nothing is saved.
                user.email = user.get_username()
            yield user

    def save(self, *args: Any, **kwargs: Any) -> None:
        kwargs["domain_override"] = urlsplit(settings.SILL_BASE_URL).netloc or "sill"
        super().save(*args, **kwargs)


def _count(key: str) -> tuple[int, int]:
    """Add one to the hour-long counter ``key``; (count, seconds until it resets)."""
    now = int(time.time())
    started = cache.get_or_set(f"{key}:start", now, WINDOW_SECONDS) or now
    try:
        count = cache.incr(key)
    except ValueError:  # the window's first request, or one racing it: add() lets one win
        count = 1 if cache.add(key, 1, WINDOW_SECONDS) else cache.incr(key)
    return count, max(1, int(started) + WINDOW_SECONDS - now)


class PasswordResetView(auth_views.PasswordResetView):
    template_name = "accounts/password_reset.html"
    email_template_name = "accounts/email/password_reset.txt"
    subject_template_name = "accounts/email/password_reset_subject.txt"
    form_class = SillPasswordResetForm
    success_url = reverse_lazy("accounts:password-reset-done")

    def get_extra_email_context(self) -> dict[str, Any]:
        return {
            "base_url": (settings.SILL_BASE_URL or "").rstrip("/"),
            "minutes_text": _minutes_text(),
        }

    def post(self, request: Any, *args: Any, **kwargs: Any) -> HttpResponse:
        count, wait = _count(f"sill:pwreset:addr:{client_address(request)}")
        if count > _per_address_per_hour():
            response = render(
                request,
                self.template_name,
                {"form": self.get_form(), "limited": True, "minutes": math.ceil(wait / 60)},
                status=429,
            )
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: Any) -> HttpResponse:
        self.extra_email_context = self.get_extra_email_context()
        email = form.cleaned_data["email"].strip().lower()
        count, _ = _count(f"sill:pwreset:email:{email}")
        if count > _per_hour():
            # Same answer, nothing sent: the mailbox is not flooded and nothing is revealed.
            return super(auth_views.PasswordResetView, self).form_valid(form)
        return super().form_valid(form)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "accounts/password_reset_sent.html"
    extra_context = {"minutes_text": _minutes_text}


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "accounts/password_set.html"
    success_url = reverse_lazy("accounts:password-reset-complete")
    extra_context = {"minutes_text": _minutes_text}

    def form_valid(self, form: Any) -> HttpResponse:
        # Signed with the new password, by the account whose email proved it: a reset is how
        # someone holding a member's mailbox takes their account.
        with transaction.atomic():
            response = super().form_valid(form)
            record_own_account_change(form.user, "password_reset", actor=form.user)
        return response


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "accounts/password_reset_complete.html"
