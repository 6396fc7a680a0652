"""The invitee's page: ``/invite/<token>/`` (anyone with the link; see sill/accounts/invites.py).

One URL, three answers, decided by who opens it:

- an address without a password: a set-password form (Django's validators); on success the
  invitee is a member and is sent to the login page to sign in with the new password;
- an address with a Sill account: "log in to join" while signed out, a Join button once signed
  in as that address (no password change);
- someone signed in as another address: told whose invitation it is, nothing changes.

A link that opens nothing (unknown, used, revoked, expired) answers 404 or 410 with the reason
in words and changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import SetPasswordForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from sill.accounts import invites
from sill.accounts.access import switch_site
from sill.accounts.models import Role
from sill.errors import SillError


def _unusable(request: HttpRequest, error: SillError) -> HttpResponse:
    status = 404 if error.code == "invite_unknown" else 410
    return render(request, "accounts/invite_unusable.html", {"error": error}, status=status)


def _page(
    request: HttpRequest,
    opened: invites.OpenInvite,
    *,
    form: SetPasswordForm[Any] | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    invite = opened.invite
    user = request.user
    signed_in_as = user.get_username() if user.is_authenticated else ""
    if signed_in_as and signed_in_as != invite.email:
        step = "other_user"
    elif opened.needs_password:
        step = "set_password"
    elif signed_in_as:
        step = "join"
    else:
        step = "log_in"
    if step == "set_password" and form is None:
        form = SetPasswordForm(_password_user(opened))
    return render(
        request,
        "accounts/invite_accept.html",
        {
            "invite": invite,
            "site": invite.site,
            "role": Role(invite.role).label,
            "step": step,
            "form": form,
            "error": error,
            "signed_in_as": signed_in_as,
            "login_url": f"{reverse('accounts:login')}?next={request.path}",
        },
        status=status,
    )


def _password_user(opened: invites.OpenInvite) -> Any:
    """The user the password validators compare against (unsaved for a new address)."""
    if opened.user is not None:
        return opened.user
    email = opened.invite.email
    return get_user_model()(username=email, email=email)


@require_http_methods(["GET", "HEAD", "POST"])
def invite_accept(request: HttpRequest, token: str) -> HttpResponse:
    try:
        opened = invites.open_invite(token)
    except invites.InviteUnusable as error:
        return _unusable(request, error)
    if request.method in ("GET", "HEAD"):
        return _page(request, opened)

    invite = opened.invite
    user = request.user
    if user.is_authenticated and user.get_username() != invite.email:
        return _page(request, opened, status=403)
    try:
        if opened.needs_password:
            form = SetPasswordForm(_password_user(opened), request.POST)
            if not form.is_valid():
                return _page(request, opened, form=form, status=422)
            invites.accept_invite(token=token, password=form.cleaned_data["new_password1"])
            messages.success(
                request,
                f"Welcome to {invite.site.name}. Your password is set: log in with "
                f"{invite.email} to start.",
            )
            return HttpResponseRedirect(reverse("accounts:login"), status=303)
        if not user.is_authenticated:
            return HttpResponseRedirect(f"{reverse('accounts:login')}?next={request.path}")
        invites.accept_invite(token=token, user=user)
    except invites.InviteUnusable as error:
        return _unusable(request, error)
    except SillError as error:
        return _page(request, opened, error=error.message, status=422)
    switch_site(request, invite.site_id)
    messages.success(
        request, f"You joined {invite.site.name} as {Role(invite.role).label.lower()}."
    )
    return HttpResponseRedirect(reverse("orders:dashboard"), status=303)
