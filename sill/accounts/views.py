from __future__ import annotations

import math
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from sill.accounts import two_factor
from sill.accounts.access import switch_site
from sill.accounts.login_throttle import seconds_until_unlocked


class LoginView(auth_views.LoginView):
    """Django's login (it rotates the session key on login), with Sill's template.

    django-axes counts its failures (sill/accounts/login_throttle.py); a locked-out try gets
    :func:`locked_out` instead of the form. A user with an authenticator is not logged in by
    the password: the code step (``accounts:login-code``) does that.
    """

    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        user = form.get_user()
        if two_factor.has_authenticator(user):
            return two_factor.start_login_step(self.request, user, self.get_success_url())
        return super().form_valid(form)


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """django-axes' lockout answer (``AXES_LOCKOUT_CALLABLE``), for the product's login and the
    Django admin's: 429 with ``Retry-After``, saying when to try again and nothing about
    whether the account exists."""
    seconds = seconds_until_unlocked(request, credentials)
    response = render(
        request,
        "accounts/locked_out.html",
        {"minutes": math.ceil(seconds / 60), "login_url": request.path},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


@require_POST
def switch_site_view(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("accounts:login")
    site_id = request.POST.get("site", "")
    if not switch_site(request, site_id):
        messages.error(request, "You are not a member of that site.")
    nxt = request.POST.get("next", "/")
    if not url_has_allowed_host_and_scheme(
        nxt, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        nxt = "/"
    # Object pages of the previous site would 404 on the new one: go to the list instead.
    if nxt.startswith("/orders/"):
        nxt = "/orders/"
    return HttpResponseRedirect(nxt)
