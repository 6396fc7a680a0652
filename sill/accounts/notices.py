"""Emails to a site's members about something that waits for them, and the links in them.

Who hears: the site's members in the roles that can act on it, whose accounts are active (a
deactivated account is locked out of Sill and hears nothing more of its refunds and buyers).
Links are built from ``SILL_BASE_URL``, never from a request's Host header: the emails are sent
by tasks, with no request, and must not point anywhere a caller chose.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from django.conf import settings
from django.core.mail import send_mail

from sill.accounts.models import Membership


def member_emails(site_id: str, *, roles: Collection[str]) -> list[str]:
    """The addresses of the site's active members in ``roles``, each once, sorted."""
    members = Membership.objects.filter(
        site_id=site_id, role__in=list(roles), user__is_active=True
    ).select_related("user")
    emails = {(m.user.email or m.user.get_username()).strip().lower() for m in members}
    return sorted(e for e in emails if "@" in e)


def absolute_url(path: str) -> str:
    """``path`` (from ``reverse``) as a link an email can carry."""
    return (settings.SILL_BASE_URL or "").rstrip("/") + path


def email_members(
    *, site_id: str, roles: Collection[str], subject: str, lines: Iterable[str]
) -> list[str]:
    """Send one plain-text email to :func:`member_emails`; the addresses it went to, none when
    the site has no such member (nothing sent). The mail server's refusal is raised (an
    ``OSError`` for SMTP), so a caller that claimed the notice can give the claim back."""
    recipients = member_emails(site_id, roles=roles)
    if recipients:
        send_mail(
            subject=subject,
            message="\n".join(lines) + "\n",
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=recipients,
        )
    return recipients
