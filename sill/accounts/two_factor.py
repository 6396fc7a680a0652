"""Two-factor authentication: devices, codes, and who must have them (django-otp underneath).

A user has at most one *authenticator* (a confirmed ``TOTPDevice`` named :data:`TOTP_NAME`)
and one set of *recovery codes* (a ``StaticDevice`` named :data:`RECOVERY_NAME`, ten tokens).
Recovery codes are shown once, when made, and stored only as a keyed hash
(:func:`_hash_code`: HMAC-SHA256 under ``SECRET_KEY``, 16 hex digits, which is what fits
django-otp's token column), so a copy of the database does not give them away. A code is
deleted when used: each works once.

A session is *verified* when a code was entered in it (``django_otp.login``, which
``request.user.is_verified()`` reads); :func:`mark_verified` also stamps the time, so the
most sensitive changes can ask for a code again after ``SILL_TWO_FACTOR_FRESH_SECONDS``
(:func:`freshness`, which their services judge with :func:`check_widening`).

Enforcement (:func:`refusal`) is asked by ``sill.accounts.access.site_view`` for every
state-changing request to a view guarded by one of :data:`GUARDED_CAPS`, and by the rules API:
on a site with ``require_two_factor``, an owner or admin needs a confirmed authenticator and a
verified session. Enabling and removing an authenticator, and replacing the recovery codes,
each write a signed ``member_change`` record on every site the user belongs to (no secret in
it); switching a site's requirement (:func:`set_required`) writes a ``settings_change``
record on that site.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

import django_otp
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from sill.accounts.admin_audit import (
    record_account_change,
    record_admin_change,
    record_own_account_change,
)
from sill.accounts.models import Membership, Role, Site
from sill.error_pages import wants_json
from sill.errors import SillError

TOTP_NAME = "authenticator"
RECOVERY_NAME = "recovery codes"
RECOVERY_CODE_COUNT = 10
VERIFIED_AT_KEY = "sill_otp_verified_at"
# A login whose password was right, waiting for its code (views_two_factor.login_code).
PENDING_KEY = "sill_2fa_pending"
PENDING_SECONDS = 300
# Roles whose changes need the second factor where the site requires it.
GUARDED_ROLES = frozenset({Role.OWNER, Role.ADMIN})
# Readable with a second factor or without; a code is asked only for a change (POST & co.).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class TwoFactorRequired(Exception):
    """Refused for want of a second factor; ``reason`` is one of the constants below."""

    NO_DEVICE = "no_device"  # the user has no confirmed authenticator
    NOT_VERIFIED = "not_verified"  # … has one, but this session did not enter a code
    NOT_FRESH = "not_fresh"  # … did, but longer ago than a sensitive change allows

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def message(self) -> str:
        if self.reason == self.NO_DEVICE:
            return (
                "This site requires two-factor authentication for owners and admins: set up "
                "an authenticator on your account page, then try again."
            )
        if self.reason == self.NOT_VERIFIED:
            return "Enter a code from your authenticator to make changes, then try again."
        return "This change needs a fresh code: enter one from your authenticator, then try again."


# --- devices -----------------------------------------------------------------------------


def authenticator(user: Any, *, confirmed: bool = True) -> TOTPDevice | None:
    return TOTPDevice.objects.filter(user=user, name=TOTP_NAME, confirmed=confirmed).first()


def has_authenticator(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False)) and (
        TOTPDevice.objects.filter(user=user, name=TOTP_NAME, confirmed=True).exists()
    )


def recovery_codes_left(user: Any) -> int:
    return StaticToken.objects.filter(device__user=user, device__name=RECOVERY_NAME).count()


class AlreadyEnrolled(SillError):
    """The user has an authenticator: replacing it would remove it without a code (and verify
    the session that did so with the new one), so it is removed first, with a code."""

    code = "two_factor_enabled"
    status = 409

    def __init__(self) -> None:
        super().__init__(
            "You already have an authenticator: remove it with a code first, then set up the "
            "new one."
        )


def start_enrolment(user: Any) -> TOTPDevice:
    """A new unconfirmed authenticator (any earlier unconfirmed one is dropped).

    Raises :class:`AlreadyEnrolled` when the user has a confirmed one."""
    if has_authenticator(user):
        raise AlreadyEnrolled
    TOTPDevice.objects.filter(user=user, confirmed=False).delete()
    return TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=False)


def _hash_code(code: str) -> str:
    normal = code.strip().replace("-", "").replace(" ", "").lower()
    digest = hmac.new(settings.SECRET_KEY.encode(), normal.encode(), hashlib.sha256)
    return digest.hexdigest()[:16]


def _new_recovery_codes(user: Any) -> list[str]:
    StaticDevice.objects.filter(user=user, name=RECOVERY_NAME).delete()
    device = StaticDevice.objects.create(user=user, name=RECOVERY_NAME, confirmed=True)
    codes = [f"{secrets.token_hex(3)}-{secrets.token_hex(3)}" for _ in range(RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=_hash_code(c)) for c in codes)
    return codes


def confirm_enrolment(request: HttpRequest, code: str) -> list[str] | None:
    """Confirm the pending authenticator with ``code``; its recovery codes, or None if wrong.

    The session that confirms is verified with the new device (it just proved it has it).
    Raises :class:`AlreadyEnrolled` when the user has a confirmed authenticator (one confirmed
    since this enrolment started, in another session): it is never replaced this way."""
    user = request.user
    with transaction.atomic():
        pending = (
            TOTPDevice.objects.select_for_update()
            .filter(user=user, name=TOTP_NAME, confirmed=False)
            .first()
        )
        if TOTPDevice.objects.filter(user=user, confirmed=True).exists():
            raise AlreadyEnrolled
        if pending is None or not pending.verify_token(_digits(code)):
            return None
        pending.confirmed = True
        pending.save(update_fields=["confirmed"])
        codes = _new_recovery_codes(user)
        record_own_account_change(user, "two_factor_enabled", actor=user)
    mark_verified(request, pending)
    return codes


def regenerate_recovery_codes(user: Any) -> list[str]:
    """Replace the user's recovery codes. Each new code passes the second factor as the
    authenticator does, so the replacement is signed like enabling one (no code in it)."""
    with transaction.atomic():
        codes = _new_recovery_codes(user)
        record_own_account_change(user, "recovery_codes_replaced", actor=user)
        return codes


def remove(user: Any, *, actor: Any) -> bool:
    """Delete the user's authenticator and recovery codes; record it (``actor``: the user, or
    None for an operator's ``manage.py two_factor reset`` after a lost phone and codes), on
    every site they belong to, or every site for a superuser (whose second factor guards the
    Django admin of every site). False, and nothing recorded, when there was nothing to
    delete."""
    with transaction.atomic():
        authenticators, _ = TOTPDevice.objects.filter(user=user).delete()
        codes, _ = StaticDevice.objects.filter(user=user).delete()
        if not authenticators and not codes:
            return False
        record_account_change(user, "two_factor_removed", actor=actor)
    return True


# --- codes -------------------------------------------------------------------------------


def _digits(code: str) -> str:
    return code.strip().replace(" ", "")


def check_code(user: Any, code: str) -> TOTPDevice | StaticDevice | None:
    """The device ``code`` is valid for (TOTP, or a recovery code, which is then spent)."""
    code = (code or "").strip()[:32]
    if not code:
        return None
    totp = authenticator(user)
    if totp is None:
        return None
    if len(_digits(code)) == 6 and _digits(code).isdigit():
        return totp if totp.verify_token(_digits(code)) else None
    recovery = StaticDevice.objects.filter(user=user, name=RECOVERY_NAME).first()
    if recovery is None:
        return None
    # StaticDevice.verify_token deletes the token it matches: a recovery code works once.
    return recovery if recovery.verify_token(_hash_code(code)) else None


def mark_verified(request: HttpRequest, device: TOTPDevice | StaticDevice) -> None:
    django_otp.login(request, device)
    request.session[VERIFIED_AT_KEY] = int(time.time())


def is_verified(request: HttpRequest) -> bool:
    user = request.user
    verified = getattr(user, "is_verified", None)
    return bool(verified and verified())


def is_fresh(request: HttpRequest) -> bool:
    at = request.session.get(VERIFIED_AT_KEY)
    fresh: int = settings.SILL_TWO_FACTOR_FRESH_SECONDS
    return is_verified(request) and isinstance(at, int) and time.time() - at <= fresh


def set_required(*, site_id: str, required: bool) -> bool | None:
    """The operator's ``manage.py two_factor require``: whether ``site_id``'s owners and admins
    need a second factor. A switch writes a signed ``settings_change`` record (actor the
    operator) in the same transaction: switched off, every widening change of the site goes
    through without a code, and the log says from when. Returns whether it changed; None
    for an unknown site (nothing written)."""
    with transaction.atomic():
        site = Site.objects.select_for_update(no_key=True).filter(pk=site_id).first()
        if site is None:
            return None
        if site.require_two_factor == required:
            return False
        site.require_two_factor = required
        site.save(update_fields=["require_two_factor"])
        record_admin_change(
            site=site,
            kind="settings_change",
            actor=None,
            body={
                "change": "require_two_factor",
                "require_two_factor": required,
                "previous": not required,
            },
        )
    return True


# --- enforcement -------------------------------------------------------------------------


def applies(membership: Membership) -> bool:
    return bool(membership.site.require_two_factor) and membership.role in GUARDED_ROLES


def refusal(request: HttpRequest, membership: Membership) -> TwoFactorRequired | None:
    """Why ``membership`` may not change things in this session, or None when it may."""
    if not applies(membership):
        return None
    if not has_authenticator(request.user):
        return TwoFactorRequired(TwoFactorRequired.NO_DEVICE)
    if not is_verified(request):
        return TwoFactorRequired(TwoFactorRequired.NOT_VERIFIED)
    return None


def fresh_refusal(request: HttpRequest, membership: Membership) -> TwoFactorRequired | None:
    """Why ``membership`` may not make one of the most sensitive changes in this session (no
    code entered in the last few minutes), or None when it may."""
    refused = refusal(request, membership)
    if refused is None and applies(membership) and not is_fresh(request):
        refused = TwoFactorRequired(TwoFactorRequired.NOT_FRESH)
    return refused


@dataclass(frozen=True)
class Freshness:
    """What a service that can widen who may refund is told about the acting session's code.

    Such a service (an agent's keys, tokens, reactivation, refund switch and caps; a site's
    rules, auto-refund and refund window; members' roles and invitations; a rail's keys,
    secrets, live mode and switch) takes one as a required argument and calls :meth:`check`
    when, under its lock, the change turns out to widen: so a caller cannot skip the fresh
    code by forgetting it, as a view that only asked for it itself could. A view passes
    :func:`freshness` of its request; an operator's tool (a management command, a seed
    script, a test setting a site up) says so with :data:`OPERATOR`, which never refuses.
    ``None`` is refused."""

    refused: TwoFactorRequired | None
    operator: bool = False

    def check(self) -> None:
        """Raise :class:`TwoFactorRequired` unless this session may widen."""
        if self.refused is not None:
            raise self.refused


OPERATOR = Freshness(refused=None, operator=True)


def freshness(request: HttpRequest, membership: Membership) -> Freshness:
    """This session's :class:`Freshness` for ``membership`` (:func:`fresh_refusal`)."""
    return Freshness(refused=fresh_refusal(request, membership))


def check_widening(second_factor: object, *, widens: bool) -> None:
    """The services' gate: raise :class:`TwoFactorRequired` when the change ``widens`` and
    ``second_factor`` refuses. Anything but a :class:`Freshness` (``None`` included) is a
    caller's bug, refused whether the change widens or not, so it shows on the first call."""
    if not isinstance(second_factor, Freshness):
        raise TypeError(
            "second_factor must be two_factor.freshness(request, membership) or two_factor.OPERATOR"
        )
    if widens:
        second_factor.check()


def refusal_response(request: HttpRequest, refused: TwoFactorRequired) -> HttpResponse:
    """403 with words and the way out: set up an authenticator, or enter a code and come back.

    HTMX gets the partial (sill.js swaps 403s into the target), a page load the whole page,
    a JSON client ``{"error": {"code": "two_factor_required", …}}``."""
    htmx = getattr(request, "htmx", False)
    if wants_json(request):
        error = SillError(refused.message, code="two_factor_required", status=403)
        return JsonResponse(error.as_dict(), status=403)
    back = request.headers.get("HX-Current-URL") or request.META.get("HTTP_REFERER") or "/"
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = "/"
    if refused.reason == TwoFactorRequired.NO_DEVICE:
        link, label = (
            reverse("settings:account") + "#two-factor",
            "Set up two-factor authentication",
        )
    else:
        link = reverse("settings:two-factor-verify")
        label = "Enter a code"
    context = {"refused": refused, "link": link, "label": label, "back": back}
    template = "accounts/two_factor_required.html" + ("#refusal" if htmx else "")
    return render(request, template, context, status=403)


def start_login_step(request: HttpRequest, user: Any, next_url: str) -> HttpResponse:
    """The password was right and ``user`` has an authenticator: remember them (not logged
    in yet) and ask for the code."""
    request.session[PENDING_KEY] = {
        "user": user.pk,
        "backend": getattr(user, "backend", ""),
        "next": next_url,
        "at": int(time.time()),
    }
    return HttpResponseRedirect(reverse("accounts:login-code"), status=303)
