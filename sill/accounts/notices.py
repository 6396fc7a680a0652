"""Emails to a site's members about something that waits for them, and the links in them.

Who hears: the site's members in the roles that can act on it, whose accounts are active (a
deactivated account is locked out of Sill and hears nothing more of its refunds and buyers).
Each gets a message of their own, in the words for their role (an owner may record what an
admin may only look up): one address the server refuses (a mailbox that no longer exists, a
recipient's policy) then refuses that member's message only, never the others'.

Links are built from ``SILL_BASE_URL``, never from a request's Host header: the emails are sent
by tasks, with no request, and must not point anywhere a caller chose.

A refused message is not an outage. :func:`email_members` raises :class:`MessageRefused` when
the server refused every member's message, and lets any other error through as it is (a
connection refused or lost, authentication: ``OSError`` for SMTP), which fails every message
alike. A sweep that meets a refusal tries the item again later (:func:`back_off`,
:func:`not_backing_off`) and goes on with the next; an outage ends its run.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.mail import EmailMessage, get_connection
from django.utils import timezone

from sill.accounts.models import Membership

# A refused message waits this long before the next try, doubling with each refusal up to
# REFUSED_MAX_WAIT. Kept in the cache (Redis in production) rather than on the item: losing it
# only means an earlier try, and the items that are told about have no field for it.
REFUSED_FIRST_WAIT = timedelta(minutes=5)
REFUSED_MAX_WAIT = timedelta(hours=6)
_REFUSALS_KEPT_SECONDS = 7 * 24 * 3600


class MessageRefused(Exception):
    """The mail server refused the message to every recipient, though it took the connection.

    ``kind`` is the server error's class name: the one thing about it safe to log, since an
    SMTP error's text carries the recipients' addresses and the server's reply.
    """

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True)
class Delivery:
    """Who :func:`email_members` told; ``refused`` names the error's class when the server
    refused some member's message (the others were sent)."""

    sent_to: tuple[str, ...]
    refused: str = ""


def member_emails(site_id: str, *, roles: Collection[str]) -> list[str]:
    """The addresses of the site's active members in ``roles``, each once, sorted."""
    return sorted(_members_by_email(site_id, roles=roles))


def _members_by_email(site_id: str, *, roles: Collection[str]) -> dict[str, str]:
    """Each active member's address and role in ``roles``; an address two members share keeps
    the role that comes first in ``roles``."""
    members = Membership.objects.filter(
        site_id=site_id, role__in=list(roles), user__is_active=True
    ).select_related("user")
    rank = {role: i for i, role in enumerate(roles)}
    found: dict[str, str] = {}
    for m in sorted(members, key=lambda m: rank[m.role]):
        email = member_address(m.user)
        if "@" in email:
            found.setdefault(email, m.role)
    return found


def member_address(user: Any) -> str:
    """The address a member's notices go to (their email, else a username that is one)."""
    return str(user.email or user.get_username()).strip().lower()


def absolute_url(path: str) -> str:
    """``path`` (from ``reverse``) as a link an email can carry."""
    return (settings.SILL_BASE_URL or "").rstrip("/") + path


def email_members(
    *,
    site_id: str,
    subject: str,
    lines_for: Mapping[str, Sequence[str]],
    own_lines: Mapping[str, Sequence[str]] | None = None,
) -> Delivery:
    """Send each active member of the site in a role of ``lines_for`` a plain-text email of
    their own, in their role's lines (or in ``own_lines``, by :func:`member_address`, for a
    member the words differ for: whoever asked for what the others are asked to decide);
    nothing when the site has no such member.

    Raises :class:`MessageRefused` when the server refused every message; any other error of
    the mail server (an ``OSError`` for SMTP: it is down) as it is. Either way nothing counts
    as told, so a caller that claimed the notice gives the claim back.
    """
    recipients = _members_by_email(site_id, roles=list(lines_for))
    sent: list[str] = []
    refused = ""
    if not recipients:
        return Delivery(sent_to=())
    with get_connection() as connection:
        for email, role in sorted(recipients.items()):
            message = EmailMessage(
                subject=subject,
                body="\n".join((own_lines or {}).get(email) or lines_for[role]) + "\n",
                from_email=settings.DEFAULT_FROM_EMAIL,
                to=[email],
                connection=connection,
            )
            try:
                message.send()
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError) as exc:
                if not message_refused(exc):
                    raise
                refused = type(exc).__name__
                continue
            sent.append(email)
    if not sent:
        # Not chained: the server's error carries the addresses and its reply.
        raise MessageRefused(refused) from None
    return Delivery(sent_to=tuple(sent), refused=refused)


def message_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing this one message for good (its recipients at
    RCPT, or the message at DATA, with a 5xx reply), not a failure worth trying again: a 4xx
    reply is temporary (greylisting, a full mailbox, 421: the server closing the connection
    for every message), and is raised like an outage, so it is tried again."""
    if isinstance(exc, smtplib.SMTPDataError):
        return _permanent(exc.smtp_code)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [reply[0] for reply in exc.recipients.values()]
        return bool(codes) and all(_permanent(code) for code in codes)
    return False


def _permanent(code: object) -> bool:
    return isinstance(code, int) and 500 <= code < 600


def send_claimed(
    *,
    notice: str,
    what: str,
    send: Callable[[], Delivery],
    give_back: Callable[[], object],
    log: logging.Logger,
) -> bool:
    """Send a notice whose claim the caller took (a conditional UPDATE of its ``…_notified_at``):
    True when told.

    The server refusing the message to every recipient gives the claim back (``give_back``)
    and is not raised: the notice waits (:func:`back_off`) while a sweep tells the others,
    False. Any other error (a mail server that is down: an ``OSError`` for SMTP) gives it back
    and is raised, for the task's retry or the next sweep. Sent, a refusal of some recipients
    is logged. ``what`` starts each warning (``"refund rf_…: attention email"``): the log
    names the notice and the error's class, never an address or the server's reply.
    """
    try:
        delivery = send()
    except MessageRefused as refusal:
        give_back()
        wait = back_off(notice)
        log.warning(
            "%s refused (%s); tried again in %d minutes",
            what,
            refusal.kind,
            wait.total_seconds() // 60,
        )
        return False
    except Exception:
        give_back()
        raise
    forget_refusals(notice)
    if delivery.refused:
        log.warning("%s refused for a recipient (%s); the others were told", what, delivery.refused)
    return True


# --- trying a refused notice again later ------------------------------------------------------


def _refusal_key(notice: str) -> str:
    return f"sill:mail-refused:{notice}"


def back_off(notice: str) -> timedelta:
    """Record that the server refused ``notice`` (e.g. ``charge-attention:<id>``); how long
    until it is due again: REFUSED_FIRST_WAIT, doubling with each refusal, at most
    REFUSED_MAX_WAIT."""
    key = _refusal_key(notice)
    refusals = int((cache.get(key) or (0, 0.0))[0]) + 1
    wait = min(REFUSED_FIRST_WAIT * 2 ** min(refusals - 1, 16), REFUSED_MAX_WAIT)
    due = (timezone.now() + wait).timestamp()
    cache.set(key, (refusals, due), _REFUSALS_KEPT_SECONDS)
    return wait


def forget_refusals(notice: str) -> None:
    """``notice`` was sent: a later refusal of it starts again from the first wait."""
    cache.delete(_refusal_key(notice))


def not_backing_off(ids: Iterable[str], *, notice: str, limit: int) -> list[str]:
    """The first ``limit`` of ``ids`` (in order) whose ``<notice>:<id>`` is due: those waiting
    after a refusal are skipped, so they neither go first nor use up a sweep's limit."""
    picked: list[str] = []
    now = timezone.now().timestamp()
    for chunk in _chunks(ids, limit):
        keys = {_refusal_key(f"{notice}:{pk}"): pk for pk in chunk}
        waiting = {keys[k] for k, (_, due) in cache.get_many(list(keys)).items() if due > now}
        picked += [pk for pk in chunk if pk not in waiting]
        if len(picked) >= limit:
            break
    return picked[:limit]


def _chunks(ids: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for pk in ids:
        chunk.append(pk)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
