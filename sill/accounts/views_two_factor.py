"""Two-factor pages: enrolment on Settings → Your account, the login's code step, re-verifying.

- ``settings/account/two-factor/setup/`` (POST starts, GET shows the QR code and the secret,
  ``…/confirm/`` takes the account's password and the first code and answers the ten recovery
  codes, shown that once);
- ``…/recovery-codes/`` makes ten new ones (a code first), ``…/remove/`` removes it (a code);
- ``…/verify/`` enters a code in this session (after a refusal, or for a fresh one);
- ``login/code/``: after the password, for a user with an authenticator (sill.accounts.views).

Every code entry, and the enrolment's password, is throttled like the login's password: a wrong
one is a failed login to django-axes (``user_login_failed`` with the account's name), so it
counts towards the same (account, address) lockout and the same cool-down, and a locked pair
gets the lockout page before its code is even checked. django-otp adds its own growing delay
per device.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import qrcode
import qrcode.image.svg
from axes.handlers.proxy import AxesProxyHandler
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from sill.accounts import two_factor
from sill.accounts.access import Cap, site_view
from sill.accounts.views import locked_out
from sill.accounts.views_account import render_account
from sill.http import SiteRequest

WRONG_CODE = "That code didn't work. Enter the 6 digits your app shows now, or a recovery code."
WRONG_PASSWORD = "That password is wrong. Enter the one you log in with."
NO_PASSWORD = (
    "Your account has no password yet: choose one with a password-reset email, then set up "
    "the authenticator."
)


def _safe_next(request: HttpRequest, nxt: str | None, default: str = "/") -> str:
    if nxt and url_has_allowed_host_and_scheme(
        nxt, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return nxt
    return default


def attempt_code(
    request: HttpRequest, user: Any, code: str
) -> tuple[TOTPDevice | StaticDevice | None, HttpResponse | None]:
    """Check ``code`` for ``user`` under the login throttle: (device, None) when right,
    (None, lockout page) when the (account, address) pair is locked, (None, None) when wrong."""
    credentials = {"username": user.get_username()}
    if not AxesProxyHandler.is_allowed(request, credentials):
        return None, locked_out(request, None, credentials)
    device = two_factor.check_code(user, code)
    if device is None:
        user_login_failed.send(sender=__name__, credentials=credentials, request=request)
        if not AxesProxyHandler.is_allowed(request, credentials):
            return None, locked_out(request, None, credentials)
    return device, None


@require_http_methods(["GET", "HEAD", "POST"])
def login_code(request: HttpRequest) -> HttpResponse:
    pending = request.session.get(two_factor.PENDING_KEY)
    if (
        not isinstance(pending, dict)
        or time.time() - pending.get("at", 0) > two_factor.PENDING_SECONDS
    ):
        request.session.pop(two_factor.PENDING_KEY, None)
        return HttpResponseRedirect(reverse("accounts:login"), status=303)
    user = get_user_model().objects.filter(pk=pending["user"], is_active=True).first()
    if user is None:
        request.session.pop(two_factor.PENDING_KEY, None)
        return HttpResponseRedirect(reverse("accounts:login"), status=303)
    # HEAD too is a look, never an attempt: it must not count as a wrong code.
    if request.method in ("GET", "HEAD"):
        return render(request, "accounts/login_code.html", {})
    device, lockout = attempt_code(request, user, request.POST.get("code", ""))
    if lockout is not None:
        return lockout
    if device is None:
        return render(request, "accounts/login_code.html", {"error": WRONG_CODE}, status=422)
    del request.session[two_factor.PENDING_KEY]
    login(request, user, backend=pending["backend"] or None)  # rotates the session key
    two_factor.mark_verified(request, device)
    return HttpResponseRedirect(_safe_next(request, pending.get("next")), status=303)


# --- Settings → Your account -------------------------------------------------------------


def _qr_data_uri(url: str) -> str:
    image = qrcode.make(url, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    svg: bytes = image.to_string()
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode()


def _secret(device: TOTPDevice) -> str:
    text = base64.b32encode(device.bin_key).decode().rstrip("=")
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def _codes_page(request: SiteRequest, codes: list[str], *, fresh_device: bool) -> HttpResponse:
    response = render(
        request, "accounts/two_factor_codes.html", {"codes": codes, "fresh_device": fresh_device}
    )
    # Shown this once: no cache keeps a copy.
    response["Cache-Control"] = "no-store"
    return response


def _setup_page(
    request: SiteRequest, device: TOTPDevice, *, error: str = "", password_error: str = ""
) -> HttpResponse:
    context = {
        "qr": _qr_data_uri(device.config_url),
        "secret": _secret(device),
        "error": error,
        "password_error": password_error,
    }
    response = render(
        request,
        "accounts/two_factor_setup.html",
        context,
        status=422 if error or password_error else 200,
    )
    # The authenticator's key, in words and as a QR code: whoever reads it makes its codes for
    # as long as it is enrolled, so no cache (the back button, a proxy) keeps a copy either.
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "HEAD", "POST"])
@site_view(Cap.OWN_ACCOUNT)
def setup(request: SiteRequest) -> HttpResponse:
    """POST: a new pending authenticator; GET: the pending one's QR code and secret."""
    user = request.site_ctx.user
    if request.method == "POST":
        try:
            two_factor.start_enrolment(user)
        except two_factor.AlreadyEnrolled as error:
            return render_account(request, error=error.message, status=error.status)
        return HttpResponseRedirect(reverse("settings:two-factor-setup"), status=303)
    device = two_factor.authenticator(user, confirmed=False)
    if device is None:
        return HttpResponseRedirect(reverse("settings:account"), status=303)
    return _setup_page(request, device)


@require_POST
@site_view(Cap.OWN_ACCOUNT)
def confirm(request: SiteRequest) -> HttpResponse:
    user = request.site_ctx.user
    device = two_factor.authenticator(user, confirmed=False)
    if device is None:
        return HttpResponseRedirect(reverse("settings:account"), status=303)
    credentials = {"username": user.get_username()}
    if not AxesProxyHandler.is_allowed(request, credentials):
        return locked_out(request, None, credentials)
    # The password, as a new password asks for the current one: a stolen session of a member
    # who never enrolled could otherwise enrol its own authenticator, and the member's next
    # login would ask for a code only the thief has. Counted like a login's wrong password, so
    # the form is no unthrottled way to guess it either.
    if not user.has_usable_password():
        return _setup_page(request, device, password_error=NO_PASSWORD)
    if not user.check_password(request.POST.get("password", "")):
        user_login_failed.send(sender=__name__, credentials=credentials, request=request)
        if not AxesProxyHandler.is_allowed(request, credentials):
            return locked_out(request, None, credentials)
        return _setup_page(request, device, password_error=WRONG_PASSWORD)
    try:
        codes = two_factor.confirm_enrolment(request, request.POST.get("code", ""))
    except two_factor.AlreadyEnrolled as error:
        return render_account(request, error=error.message, status=error.status)
    if codes is None:
        user_login_failed.send(sender=__name__, credentials=credentials, request=request)
        return _setup_page(request, device, error=WRONG_CODE)
    return _codes_page(request, codes, fresh_device=True)


def _account_error(request: SiteRequest, error: str) -> HttpResponse:
    return render_account(request, error=error, status=422)


@require_POST
@site_view(Cap.OWN_ACCOUNT)
def recovery_codes(request: SiteRequest) -> HttpResponse:
    user = request.site_ctx.user
    device, lockout = attempt_code(request, user, request.POST.get("code", ""))
    if lockout is not None:
        return lockout
    if device is None:
        return _account_error(request, WRONG_CODE)
    two_factor.mark_verified(request, device)
    return _codes_page(request, two_factor.regenerate_recovery_codes(user), fresh_device=False)


@require_POST
@site_view(Cap.OWN_ACCOUNT)
def remove(request: SiteRequest) -> HttpResponse:
    user = request.site_ctx.user
    device, lockout = attempt_code(request, user, request.POST.get("code", ""))
    if lockout is not None:
        return lockout
    if device is None:
        return _account_error(request, WRONG_CODE)
    two_factor.remove(user, actor=user)
    messages.success(request, "Two-factor authentication is off for your account.")
    return HttpResponseRedirect(reverse("settings:account"), status=303)


@require_http_methods(["GET", "HEAD", "POST"])
@site_view(Cap.OWN_ACCOUNT)
def verify(request: SiteRequest) -> HttpResponse:
    """Enter a code in this session (``next``: where to go back to, same host only)."""
    user = request.site_ctx.user
    nxt = _safe_next(request, request.POST.get("next") or request.GET.get("next"), "")
    context: dict[str, Any] = {"next": nxt, "has_device": two_factor.has_authenticator(user)}
    if request.method in ("GET", "HEAD"):
        return render(request, "accounts/two_factor_verify.html", context)
    device, lockout = attempt_code(request, user, request.POST.get("code", ""))
    if lockout is not None:
        return lockout
    if device is None:
        context["error"] = WRONG_CODE
        return render(request, "accounts/two_factor_verify.html", context, status=422)
    two_factor.mark_verified(request, device)
    messages.success(request, "Code accepted: you can make changes for this session.")
    return HttpResponseRedirect(nxt or reverse("settings:account"), status=303)


urlpatterns: list[Any] = [
    path("settings/account/two-factor/setup/", setup, name="two-factor-setup"),
    path("settings/account/two-factor/confirm/", confirm, name="two-factor-confirm"),
    path("settings/account/two-factor/recovery-codes/", recovery_codes, name="two-factor-codes"),
    path("settings/account/two-factor/remove/", remove, name="two-factor-remove"),
    path("settings/account/two-factor/verify/", verify, name="two-factor-verify"),
]
