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

Each member hears of a notice at most once, however often it is tried. The callers' claim of
the notice (a conditional UPDATE of its row's ``…_notified_at``) is given back when the mail
server fails part-way, and the retry would otherwise send again to those it had already taken
a message for. So :func:`email_members` claims each member too, as a
:class:`~sill.accounts.models.NoticeDelivery` row, *before* handing their message to the
server, and deletes the row when the server does not take it; a retry sends only to the
members without a row. Claimed before, not recorded after: a worker that dies between the
server taking a message and the row being written would send it again, while one that dies
between the row and the server's answer leaves one member untold. Sill chooses the second,
at most once. A greylisted member (a 4xx reply) is told on the retry, the others meanwhile.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.mail import EmailMessage, get_connection
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from sill.accounts.models import Membership, NoticeDelivery
from sill.cache_down import CACHE_UNREACHABLE

logger = logging.getLogger(__name__)

# A refused message waits this long before the next try, doubling with each refusal up to
# REFUSED_MAX_WAIT. Kept in the cache (Redis in production) rather than on the item: losing it
# only means an earlier try, and the items that are told about have no field for it.
REFUSED_FIRST_WAIT = timedelta(minutes=5)
REFUSED_MAX_WAIT = timedelta(hours=6)
_REFUSALS_KEPT_SECONDS = 7 * 24 * 3600

# A notice's delivery rows matter while the notice may be tried again: until every member
# was told, or refused for good. Only a member the server answers "later" (4xx) for a month
# keeps a notice open that long; then those told before it may hear of it again.
DELIVERIES_KEPT = timedelta(days=30)
DELIVERIES_PURGED_AT_ONCE = 500


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
    """Who :func:`email_members` told this time; ``told_before`` counts the members an earlier
    try of the notice told (or another sender is telling), not sent again; ``refused`` names
    the error's class when the server refused some member's message (the others were sent)."""

    sent_to: tuple[str, ...]
    refused: str = ""
    told_before: int = 0

    @property
    def told(self) -> bool:
        """Whether anyone has been told of the notice, now or by an earlier try."""
        return bool(self.sent_to) or self.told_before > 0


@dataclass(frozen=True)
class _Recipient:
    """One address to tell: the role whose words it gets, and the users behind it (two
    members may share an address; it gets one message, claimed for the first of them)."""

    role: str
    user_ids: tuple[int, ...]


def member_emails(site_id: str, *, roles: Collection[str]) -> list[str]:
    """The addresses of the site's active members in ``roles``, each once, sorted."""
    return sorted(_members_by_email(site_id, roles=roles))


def _members_by_email(site_id: str, *, roles: Collection[str]) -> dict[str, _Recipient]:
    """Each active member's address in ``roles``, with its role and users; an address two
    members share keeps the role that comes first in ``roles``, and its users in that order
    (then by id: every try of a notice claims the same one)."""
    members = Membership.objects.filter(
        site_id=site_id, role__in=list(roles), user__is_active=True
    ).select_related("user")
    rank = {role: i for i, role in enumerate(roles)}
    found: dict[str, _Recipient] = {}
    for m in sorted(members, key=lambda m: (rank[m.role], m.user_id)):
        email = member_address(m.user)
        if "@" not in email:
            continue
        known = found.get(email)
        found[email] = (
            _Recipient(role=known.role, user_ids=(*known.user_ids, m.user_id))
            if known
            else _Recipient(role=m.role, user_ids=(m.user_id,))
        )
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
    notice: str,
    subject: str,
    lines_for: Mapping[str, Sequence[str]],
    own_lines: Mapping[str, Sequence[str]] | None = None,
) -> Delivery:
    """Send each active member of the site in a role of ``lines_for`` a plain-text email of
    their own, in their role's lines (or in ``own_lines``, by :func:`member_address`, for a
    member the words differ for: whoever asked for what the others are asked to decide);
    nothing when the site has no such member.

    ``notice`` names what they are told of (``refund-attention:<refund id>``): a member an
    earlier call for the same notice told is not sent it again (``Delivery.told_before``).
    Each member is claimed (a :class:`NoticeDelivery` row) before their message goes to the
    server, and given back if the server does not take it, so the next call tells them.

    Raises :class:`MessageRefused` when the server refused every message and nobody was
    told before. A member the server answers "later" (4xx: greylisting) does not stop the
    others: their error is raised once the rest were sent. Any other error of the mail server
    (an ``OSError`` for SMTP: it is down) is raised at once. Raised, the notice is not done:
    a caller that claimed it gives the claim back, and its retry tells those left.
    """
    recipients = _members_by_email(site_id, roles=list(lines_for))
    told = _told_before(site_id=site_id, notice=notice, recipients=recipients.values())
    untold = {e: r for e, r in recipients.items() if told.isdisjoint(r.user_ids)}
    told_before = len(recipients) - len(untold)
    sent: list[str] = []
    refused = ""
    later: smtplib.SMTPException | None = None
    if not untold:
        return Delivery(sent_to=(), told_before=told_before)
    forget_old_deliveries()
    with get_connection() as connection:
        for email, recipient in sorted(untold.items()):
            claim = _claim(site_id=site_id, notice=notice, user_id=recipient.user_ids[0])
            if claim is None:  # another sender of this notice took them first
                told_before += 1
                continue
            message = EmailMessage(
                subject=subject,
                body="\n".join((own_lines or {}).get(email) or lines_for[recipient.role]) + "\n",
                from_email=settings.DEFAULT_FROM_EMAIL,
                to=[email],
                connection=connection,
            )
            try:
                message.send()
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError) as exc:
                _give_back(claim)
                if message_refused(exc):
                    refused = type(exc).__name__
                elif refused_for_now(exc):
                    later = later or exc
                else:
                    raise
                continue
            except BaseException:
                _give_back(claim)
                raise
            sent.append(email)
    if later is not None:
        raise later
    if refused and not sent and not told_before:
        # Not chained: the server's error carries the addresses and its reply.
        raise MessageRefused(refused) from None
    return Delivery(sent_to=tuple(sent), refused=refused, told_before=told_before)


def _told_before(*, site_id: str, notice: str, recipients: Iterable[_Recipient]) -> set[int]:
    """The users among ``recipients`` who hold a claim of ``notice`` on the site."""
    user_ids = [u for r in recipients for u in r.user_ids]
    return set(
        NoticeDelivery.objects.filter(
            site_id=site_id, notice=notice, user_id__in=user_ids
        ).values_list("user_id", flat=True)
    )


def _claim(*, site_id: str, notice: str, user_id: int) -> int | None:
    """Claim ``notice`` for the user, committed before their message is sent (unless the
    caller holds a transaction open); the row's id, or None when it was claimed already."""
    try:
        with transaction.atomic():
            row = NoticeDelivery.objects.create(
                site_id=site_id, notice=notice, user_id=user_id, claimed_at=timezone.now()
            )
    except IntegrityError:
        return None
    return row.pk


def _give_back(claim: int) -> None:
    """The server did not take the message: the next try of the notice sends it. A row that
    cannot be deleted (the database failing too) leaves that member untold, never told
    twice; the mail server's error matters more than this one."""
    try:
        NoticeDelivery.objects.filter(pk=claim).delete()
    except DatabaseError:
        logger.exception("notice delivery %s: not given back", claim)


def forget_old_deliveries(*, now: datetime | None = None) -> int:
    """Delete up to ``DELIVERIES_PURGED_AT_ONCE`` delivery rows claimed more than
    ``DELIVERIES_KEPT`` ago; how many went. Run by each notice that sends, which is what
    makes the rows: they stay bounded by the mail of the last ``DELIVERIES_KEPT``."""
    before = (now or timezone.now()) - DELIVERIES_KEPT
    old = NoticeDelivery.objects.filter(claimed_at__lt=before)
    pks = list(old.order_by().values_list("pk", flat=True)[:DELIVERIES_PURGED_AT_ONCE])
    if not pks:
        return 0
    deleted, _ = old.filter(pk__in=pks).delete()
    return deleted


def message_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing this one message for good (its recipients at
    RCPT, or the message at DATA, with a 5xx reply), not a failure worth trying again: a 4xx
    reply is temporary (greylisting, a full mailbox: :func:`refused_for_now`; 421, the server
    closing the connection for every message, is an outage), so it is tried again."""
    if isinstance(exc, smtplib.SMTPDataError):
        return _permanent(exc.smtp_code)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [reply[0] for reply in exc.recipients.values()]
        return bool(codes) and all(_permanent(code) for code in codes)
    return False


def refused_for_now(exc: BaseException) -> bool:
    """Whether ``exc`` is the server asking for this one message later (a 4xx reply to its
    recipients or its data: greylisting, a full mailbox), so the other members' messages are
    still sent. Not 421: that is the server closing the connection on every message."""
    if isinstance(exc, smtplib.SMTPDataError):
        codes = [exc.smtp_code]
    elif isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [reply[0] for reply in exc.recipients.values()]
    else:
        return False
    return bool(codes) and all(_temporary(code) for code in codes)


def _permanent(code: object) -> bool:
    return isinstance(code, int) and 500 <= code < 600


def _temporary(code: object) -> bool:
    return isinstance(code, int) and 400 <= code < 500 and code != 421


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
    and is raised, for the task's retry or the next sweep, which sends only to the members
    not told yet (:func:`email_members`). Sent, a refusal of some recipients is logged.
    ``what`` starts each warning (``"refund rf_…: attention email"``): the log names the
    notice and the error's class, never an address or the server's reply.
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


# A cache that cannot be reached (Redis down, sill.cache_down) costs the back-off only: a
# message already sent is not failed for it, and a sweep that cannot tell which notices wait
# picks none of them (claimed by nobody, they are all sent by the first sweep after).


def back_off(notice: str) -> timedelta:
    """Record that the server refused ``notice`` (e.g. ``charge-attention:<id>``); how long
    until it is due again: REFUSED_FIRST_WAIT, doubling with each refusal, at most
    REFUSED_MAX_WAIT. With the cache unreachable nothing is recorded: the first wait."""
    key = _refusal_key(notice)
    try:
        refusals = int((cache.get(key) or (0, 0.0))[0]) + 1
        wait = min(REFUSED_FIRST_WAIT * 2 ** min(refusals - 1, 16), REFUSED_MAX_WAIT)
        due = (timezone.now() + wait).timestamp()
        cache.set(key, (refusals, due), _REFUSALS_KEPT_SECONDS)
    except CACHE_UNREACHABLE as exc:
        _cache_unreachable(exc, f"{notice}: its refusal is not recorded")
        return REFUSED_FIRST_WAIT
    return wait


def forget_refusals(notice: str) -> None:
    """``notice`` was sent: a later refusal of it starts again from the first wait. With the
    cache unreachable, a later refusal may wait longer; the notice was sent all the same."""
    try:
        cache.delete(_refusal_key(notice))
    except CACHE_UNREACHABLE as exc:
        _cache_unreachable(exc, f"{notice}: sent; its earlier refusals are not forgotten")


def not_backing_off(ids: Iterable[str], *, notice: str, limit: int) -> list[str]:
    """The first ``limit`` of ``ids`` (in order) whose ``<notice>:<id>`` is due: those waiting
    after a refusal are skipped, so they neither go first nor use up a sweep's limit.

    Empty while the cache cannot be reached: which ones wait is unknown, and sending them all
    would send the refused ones again every sweep, first. Nothing is claimed, so the first
    sweep after the cache is back picks them up."""
    picked: list[str] = []
    now = timezone.now().timestamp()
    try:
        for chunk in _chunks(ids, limit):
            keys = {_refusal_key(f"{notice}:{pk}"): pk for pk in chunk}
            waiting = {keys[k] for k, (_, due) in cache.get_many(list(keys)).items() if due > now}
            picked += [pk for pk in chunk if pk not in waiting]
            if len(picked) >= limit:
                break
    except CACHE_UNREACHABLE as exc:
        _cache_unreachable(exc, f"{notice} sweep: nothing picked; the next sweep tries")
        return []
    return picked[:limit]


def _cache_unreachable(exc: Exception, what: str) -> None:
    # The class only: redis' message names the cache's host and port.
    logger.warning("the cache cannot be reached (%s): %s", type(exc).__name__, what)


def _chunks(ids: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for pk in ids:
        chunk.append(pk)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
