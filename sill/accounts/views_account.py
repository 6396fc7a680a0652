"""Settings → Your account (every member): where you are signed in, and your password.

Sessions belong to the user, not to a site: the page lists every live session of the signed-in
user (times in the current site's zone) and ends them one by one or all at once. Sessions are
named by :func:`sill.accounts.sessions.public_id`, never by their key, and another user's
session id is a 404. A new password ends every other session (the ``pre_save`` receiver in
``sill.accounts.sessions``) and keeps this one (``update_session_auth_hash``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout, update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.db import transaction
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.views.decorators.http import require_POST, require_safe

from sill.accounts import sessions, two_factor
from sill.accounts.access import Cap, site_view
from sill.accounts.admin_audit import record_own_account_change
from sill.http import SiteRequest

EVERYWHERE = "all"


def _page(
    request: SiteRequest,
    *,
    password_form: PasswordChangeForm | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    site, user = request.site_ctx.site, request.site_ctx.user
    zone = site.zone
    rows = sessions.sessions_of(user=user, current_key=request.session.session_key, zone=zone)
    return render(
        request,
        "accounts/account.html",
        {
            "rows": rows,
            "others": sum(1 for row in rows if not row.current),
            "zone": zone.key,
            "password_form": password_form or PasswordChangeForm(user),
            "has_password": user.has_usable_password(),
            "idle": sessions.describe_duration(settings.SILL_SESSION_IDLE_SECONDS),
            "max": sessions.describe_duration(settings.SILL_SESSION_MAX_SECONDS),
            "error": error,
            "two_factor": two_factor.has_authenticator(user),
            "two_factor_verified": two_factor.is_verified(request),
            "recovery_left": two_factor.recovery_codes_left(user),
            "two_factor_required": two_factor.applies(request.site_ctx.membership),
        },
        status=status,
    )


# The page with an error, for the two-factor forms on it (sill/accounts/views_two_factor.py).
render_account = _page


@require_safe
@site_view(Cap.OWN_ACCOUNT)
def account(request: SiteRequest) -> HttpResponse:
    return _page(request)


@require_POST
@site_view(Cap.OWN_ACCOUNT)
def account_logout(request: SiteRequest) -> HttpResponse:
    """``session`` = a session's public id (that one) or ``all`` (every one, this included)."""
    wanted = request.POST.get("session", "").strip()
    if not wanted:
        return _page(request, error="Choose a session to log out.", status=422)
    if wanted == EVERYWHERE:
        sessions.end_sessions(user=request.site_ctx.user)
        logout(request)
        messages.success(request, "You were logged out everywhere, this device included.")
        return HttpResponseRedirect(reverse("accounts:login"), status=303)
    is_current = request.session.session_key is not None and wanted == sessions.public_id(
        request.session.session_key
    )
    if is_current:
        logout(request)
        return HttpResponseRedirect(reverse("accounts:login"), status=303)
    if not sessions.end_session(user=request.site_ctx.user, session_id=wanted):
        raise Http404("No such session")
    messages.success(request, "That session was logged out.")
    return HttpResponseRedirect(reverse("settings:account"), status=303)


@require_POST
@site_view(Cap.OWN_ACCOUNT)
def account_password(request: SiteRequest) -> HttpResponse:
    form = PasswordChangeForm(request.site_ctx.user, request.POST)
    if not form.is_valid():
        return _page(request, password_form=form, status=422)
    with transaction.atomic():
        user = form.save()  # the pre_save receiver ends every session of the user …
        record_own_account_change(user, "password_change", actor=user)
    update_session_auth_hash(request, user)  # … and this one goes on under a new key
    messages.success(request, "Password changed. Every other session was logged out.")
    return HttpResponseRedirect(reverse("settings:account"), status=303)


urlpatterns: list[Any] = [
    path("settings/account/", account, name="account"),
    path("settings/account/logout/", account_logout, name="account-logout"),
    path("settings/account/password/", account_password, name="account-password"),
]
