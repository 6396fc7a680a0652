"""How django-axes counts failed logins (settings: ``AXES_*`` and ``SILL_LOGIN_*``).

Axes records each failure against (account, client address) and, with
``AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]``, locks that *pair* once it has
``SILL_LOGIN_FAILURE_LIMIT`` failures, until ``SILL_LOGIN_COOLOFF_MINUTES`` after the failure
that locked it. Tries while locked are refused without being recorded
(``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False``): axes appends each recorded try to
its row, so recording a flood would grow one row without bound and make every refusal a write.

Why the pair, not the account alone: a lock on the account would be a lock an attacker could
place on the owner from anywhere. Locking the pair stops the attacker's address guessing that
account, while the owner, from the owner's own address, still logs in. What it does not stop
is one address trying many accounts; :func:`failure_limit` adds that bound: an address with
``SILL_LOGIN_ADDRESS_FAILURE_LIMIT`` failures in the window, over all accounts, is locked for
every account (its limit drops to zero). Guessing one account from many addresses is left to
strong passwords and the second factor.

Both the product's login and the Django admin's go through the same backends
(``AUTHENTICATION_BACKENDS``), so both are counted and locked alike.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest
from django.utils import timezone


def username_of(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The account a login names, as counted: ``Owner@X `` and ``owner@x`` are one account
    (the email is the login name), so changing case does not buy an attacker more tries."""
    raw = (credentials or {}).get("username")
    if raw is None:
        raw = request.POST.get("username")
    if not isinstance(raw, str):
        return None
    return raw.strip().lower()[:255] or None


def failure_limit(request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """Failures allowed to the (account, address) pair: zero once the address is spraying."""
    address = getattr(request, "axes_ip_address", None)
    if address:
        since = get_cool_off_threshold(request)
        failures = AccessAttempt.objects.filter(
            ip_address=address, attempt_time__gte=since
        ).aggregate(n=Sum("failures_since_start"))["n"]
        if (failures or 0) >= settings.SILL_LOGIN_ADDRESS_FAILURE_LIMIT:
            return 0
    limit: int = settings.SILL_LOGIN_FAILURE_LIMIT
    return limit


def seconds_until_unlocked(request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """At most how long a locked-out client waits: a cool-down after its last recorded failure
    (the account's from this address, else the address's). For the lockout page's
    ``Retry-After``."""
    cool_off = timedelta(minutes=settings.SILL_LOGIN_COOLOFF_MINUTES)
    address = getattr(request, "axes_ip_address", None)
    from_address = AccessAttempt.objects.filter(ip_address=address)
    account = from_address.filter(username=username_of(request, credentials))
    latest = (
        account.aggregate(at=Max("attempt_time"))["at"]
        or from_address.aggregate(at=Max("attempt_time"))["at"]
    )
    if latest is None:
        return int(cool_off.total_seconds())
    left = (latest + cool_off - timezone.now()).total_seconds()
    return max(1, min(math.ceil(left), int(cool_off.total_seconds())))
