"""Signed-in sessions: idle and absolute timeouts, the list a member sees, ending them.

Sessions are django-qsessions rows (``qsessions.models.Session``, engine
``sill.accounts.session_store``): Django's database session with the user, user agent, address
and creation time beside it. The session row *is* the record of the device, so there is
nothing to keep in step with the session store.

Contracts:

- :class:`SessionTimeoutMiddleware` ends a session on its next request once it has been idle
  longer than ``SILL_SESSION_IDLE_SECONDS`` or is older than ``SILL_SESSION_MAX_SECONDS``
  since sign-in: the session is flushed and the request goes on signed out (pages redirect to
  the login, the API answers as to anyone anonymous).
- :func:`end_sessions` deletes a user's sessions (all, or all but one): the next request
  with such a cookie is anonymous. It runs when a user loses their last membership
  (``services.remove_member``), and, from the ``pre_save`` receiver below, whenever a user's
  password changes or they are deactivated, whoever saves the user (a page, a command, the
  Django admin, a shell). A password changed on the account page keeps that page's own
  session: ``update_session_auth_hash`` moves it to a new key after the others are gone.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.crypto import salted_hmac
from qsessions.models import Session

# Unix seconds, in the session's own data: reading them costs nothing beyond loading it.
SIGNED_IN_AT = "sill_signed_in_at"
SEEN_AT = "sill_seen_at"
# Last-seen is written at most this often: a session write on every page would be a second
# write per request for a timestamp nobody needs to the second. The idle limit is checked
# against it, so it holds to within this many seconds.
SEEN_EVERY_SECONDS = 60
_PUBLIC_ID_SALT = "sill.accounts.sessions.public-id"


def _now() -> int:
    return int(timezone.now().timestamp())


def _stamp(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def describe_duration(seconds: int) -> str:
    """``2 hours``, ``90 minutes``: how the limits are said on pages and in messages."""
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    minutes = max(1, seconds // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def start_session_clock(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """``user_logged_in`` receiver: the absolute and idle clocks start at sign-in."""
    if request is None or not hasattr(request, "session"):
        return
    now = _now()
    request.session[SIGNED_IN_AT] = now
    request.session[SEEN_AT] = now


class SessionTimeoutMiddleware:
    """End idle or too-old sessions; stamp last-seen at most once a minute.

    Sits after ``AuthenticationMiddleware`` and ``MessageMiddleware`` (it signs out and says
    why). A session without the stamps (made before this policy, or without ``login()``)
    starts its clocks on its first request.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            _enforce_limits(request)
        return self.get_response(request)


def _enforce_limits(request: HttpRequest) -> None:
    session = request.session
    now = _now()
    signed_in, seen = _stamp(session.get(SIGNED_IN_AT)), _stamp(session.get(SEEN_AT))
    if signed_in is None or seen is None:
        session[SIGNED_IN_AT] = signed_in if signed_in is not None else now
        session[SEEN_AT] = now
        return
    idle_limit = settings.SILL_SESSION_IDLE_SECONDS
    max_limit = settings.SILL_SESSION_MAX_SECONDS
    if now - seen > idle_limit:
        why = f"after {describe_duration(idle_limit)} without activity"
    elif now - signed_in > max_limit:
        why = f"{describe_duration(max_limit)} after signing in"
    else:
        if now - seen >= SEEN_EVERY_SECONDS:
            session[SEEN_AT] = now
        return
    logout(request)  # flushes the session: its row is deleted, request.user is anonymous
    if not request.path.startswith("/api/"):
        messages.info(request, f"You were signed out {why}. Sign in again to go on.")


# --- Ending sessions -------------------------------------------------------------------------


def _live_sessions(user: Any) -> QuerySet[Any]:
    return Session.objects.filter(user=user, expire_date__gt=timezone.now())


def end_sessions(*, user: Any, keep: str | None = None) -> int:
    """Delete every session of ``user`` except the one with key ``keep``; how many ended."""
    sessions = Session.objects.filter(user=user)
    if keep:
        sessions = sessions.exclude(session_key=keep)
    ended, _ = sessions.delete()
    return int(ended)


def public_id(session_key: str) -> str:
    """What pages and forms call a session: a session key is a password, never shown."""
    return salted_hmac(_PUBLIC_ID_SALT, session_key).hexdigest()[:24]


def end_session(*, user: Any, session_id: str) -> bool:
    """End the session of ``user`` whose :func:`public_id` is ``session_id``; False if none."""
    for key in _live_sessions(user).values_list("session_key", flat=True):
        if public_id(key) == session_id:
            Session.objects.filter(user=user, session_key=key).delete()
            return True
    return False


def end_sessions_on_credential_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``pre_save`` receiver for the user model: a new password or ``is_active=False`` ends
    every session of the user. Saves that name other fields only (``last_login`` at each
    sign-in) are not looked at, so signing in costs no extra query."""
    update_fields = kwargs.get("update_fields")
    if instance.pk is None or kwargs.get("raw"):
        return
    if update_fields is not None and not {"password", "is_active"} & set(update_fields):
        return
    before = sender.objects.filter(pk=instance.pk).values("password", "is_active").first()
    if before is None:
        return
    deactivated = before["is_active"] and not instance.is_active
    if deactivated or before["password"] != instance.password:
        end_sessions(user=instance)


# --- The member's own list -------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    id: str
    device: str
    user_agent: str
    address: str
    signed_in_at: datetime | None
    last_seen_at: datetime
    current: bool


def sessions_of(*, user: Any, current_key: str | None, zone: zoneinfo.ZoneInfo) -> list[SessionRow]:
    """``user``'s sessions that are still alive, most recently used first, times in ``zone``."""
    now = timezone.now()
    # The middleware ends the rest on their next request; until then they are not listed.
    alive = _live_sessions(user).filter(
        updated_at__gt=now
        - timedelta(seconds=settings.SILL_SESSION_IDLE_SECONDS + SEEN_EVERY_SECONDS),
        created_at__gt=now - timedelta(seconds=settings.SILL_SESSION_MAX_SECONDS),
    )
    rows = []
    for session in alive.order_by("-updated_at", "session_key"):
        current = session.session_key == current_key
        rows.append(
            SessionRow(
                id=public_id(session.session_key),
                device=device_label(session),
                user_agent=session.user_agent or "",
                address=session.ip or "unknown address",
                signed_in_at=timezone.localtime(session.created_at, zone)
                if session.created_at
                else None,
                last_seen_at=timezone.localtime(now if current else session.updated_at, zone),
                current=current,
            )
        )
    rows.sort(key=lambda row: not row.current)  # this device first, then the most recent
    return rows


def device_label(session: Any) -> str:
    """``Firefox 128 on Linux``, from the user agent (ua-parser, through qsessions)."""
    info = session.device_info
    if info is None:
        return "Unknown device"
    browser = info.user_agent.family if info.user_agent else ""
    if browser and info.user_agent.major:
        browser = f"{browser} {info.user_agent.major}"
    system = info.os.family if info.os else ""
    parts = [p for p in (browser, system) if p and p != "Other"]
    if not parts:
        return "Unknown browser"
    return " on ".join(parts)
