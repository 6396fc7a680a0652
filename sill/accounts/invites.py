"""Inviting members by email: invite, resend, revoke, and the invitee's accept.

Contracts:

- A link is ``{SILL_BASE_URL}/invite/<token>/`` with a random 256-bit token; only its SHA-256
  is stored (:class:`~sill.accounts.models.MemberInvite`). It works once, while the invite is
  pending, until ``SILL_INVITE_HOURS`` after it was (re)sent. Resending makes a new token (the
  old link stops working); revoking and accepting close the invite. The base URL is the
  configured one, never the request's Host header.
- Who may invite whom are the member rules of :mod:`sill.accounts.services`: owners and
  admins invite; only an owner invites an owner (or resends / revokes an owner's invite).
- Every invite, resend, revoke and accept writes a signed ``member_change`` record in the
  same transaction as the change; the email is sent inside it too, so an email that could not
  be sent leaves nothing behind (the page says so).
- Accepting: a new address (no user, or a user without a usable password) sets a password
  with Django's validators and is then sent to log in; an existing user with a password
  joins without any password change, once signed in as that user.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from sill.accounts import services, two_factor
from sill.accounts.models import MemberInvite, Membership, Role, Site
from sill.errors import SillError

logger = logging.getLogger(__name__)


class InviteUnusable(SillError):
    """The link opens no invite: unknown (mistyped, tampered, replaced), used, revoked or
    expired. ``code`` says which; the message says what to do."""

    status = 410


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _new_token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    return token, _sha256(token)


def invite_url(token: str) -> str:
    base = (settings.SILL_BASE_URL or "").rstrip("/")
    return f"{base}/invite/{token}/"


def _lifetime() -> timedelta:
    return timedelta(hours=int(settings.SILL_INVITE_HOURS))


def _record(invite: MemberInvite, *, action: str, actor: Any, **extra: Any) -> None:
    services.record_invite_change(invite, action=action, actor=actor, **extra)


# "to join Shop on Sill as a reviewer": each role with its article (staff, a group, has none).
ROLE_AS: dict[str, str] = {
    Role.OWNER: "an owner",
    Role.ADMIN: "an admin",
    Role.REVIEWER: "a reviewer",
    Role.STAFF: "staff",
}


def _send(invite: MemberInvite, token: str, *, inviter: Any) -> None:
    context = {
        "site": invite.site,
        "invite": invite,
        "url": invite_url(token),
        "inviter": inviter.get_username() if inviter is not None else "",
        "role_as": ROLE_AS[invite.role],
        "hours": int(settings.SILL_INVITE_HOURS),
    }
    send_mail(
        subject=f"You're invited to {invite.site.name} on Sill",
        message=render_to_string("accounts/email/invite.txt", context),
        from_email=None,
        recipient_list=[invite.email],
    )


def pending_invites(site: Site) -> list[MemberInvite]:
    """The site's open invites (expired ones included: they can be resent), newest first."""
    return list(
        MemberInvite.objects.filter(site=site, accepted_at=None, revoked_at=None)
        .select_related("invited_by")
        .order_by("-sent_at", "-pk")
    )


@transaction.atomic
def create_invite(
    *,
    site: Site,
    actor: Membership,
    email: str,
    role: str,
    can_refund: bool = False,
    second_factor: two_factor.Freshness,
) -> MemberInvite:
    """Invite ``email`` to ``site`` as ``role`` and email the link.

    An open invite for the same address is replaced (its link stops working). Someone who is
    already a member is refused: change their role in the list instead. An invite that lets
    its person refund or manage the site (``services.grants_more``) is refused by
    ``second_factor`` without a fresh code.
    """
    if role not in Role.values:
        raise SillError(
            f"Role must be one of {', '.join(Role.values)}.", code="invalid_field", field="role"
        )
    services.lock_for_member_change(actor)
    services.check_may_manage(actor=actor, role=role, action="invite")
    two_factor.check_widening(
        second_factor,
        widens=services.grants_more(
            before=None, role=role, can_refund=role == Role.STAFF and can_refund
        ),
    )
    email = email.strip().lower()
    if Membership.objects.filter(site=site, user__username=email).exists():
        raise SillError(
            f"{email} is already a member of {site.name}; change their role in the list below.",
            code="already_member",
            field="email",
        )
    replaced = (
        MemberInvite.objects.select_for_update()
        .filter(site=site, email=email, accepted_at=None, revoked_at=None)
        .first()
    )
    now = timezone.now()
    if replaced is not None:
        services.check_may_manage(actor=actor, role=replaced.role, action="replace the invite of")
        replaced.revoked_at = now
        replaced.save(update_fields=["revoked_at"])
    token, digest = _new_token()
    invite = MemberInvite.objects.create(
        site=site,
        email=email,
        role=role,
        can_refund=role == Role.STAFF and can_refund,
        invited_by=actor.user,
        token_sha256=digest,
        sent_at=now,
        expires_at=now + _lifetime(),
    )
    # Sent before the signed record, whose append locks the site's audit chain head until
    # COMMIT: every decision of the site appends to that chain, and none should wait for an
    # SMTP server. A refused send still rolls everything back (nothing is saved); a link sent
    # for an invite whose record then failed names no invite and opens nothing.
    _send(invite, token, inviter=actor.user)
    _record(
        invite,
        action="invite",
        actor=actor,
        replaces=replaced.pk if replaced is not None else None,
    )
    logger.info("invite %s sent on site %s by %s", invite.pk, site.pk, actor.user.get_username())
    return invite


def _inviter_may_still(invite: MemberInvite) -> bool:
    """Whether the invite's sender is still an active member whose role may send it."""
    inviter = invite.invited_by
    if inviter is None or not inviter.is_active:
        return False
    role = (
        Membership.objects.filter(site_id=invite.site_id, user=inviter)
        .values_list("role", flat=True)
        .first()
    )
    return role is not None and services.may_grant(role, invite.role)


def _locked_pending(invite: MemberInvite) -> MemberInvite:
    # The invite's row alone (``of``): joined, the site's row would be locked FOR UPDATE over
    # the member change's FOR NO KEY UPDATE, and an append of the site committing meanwhile
    # (its foreign keys' check share-locks that row while it holds the chain head) would
    # deadlock with this change's own append.
    locked = (
        MemberInvite.objects.select_for_update(of=("self",))
        .select_related("site")
        .filter(pk=invite.pk, accepted_at=None, revoked_at=None)
        .first()
    )
    if locked is None:
        raise SillError(
            f"The invite for {invite.email} was accepted or revoked meanwhile.",
            code="invite_closed",
        )
    return locked


@transaction.atomic
def resend_invite(
    *, invite: MemberInvite, actor: Membership, second_factor: two_factor.Freshness
) -> MemberInvite:
    """Email a new link for ``invite`` (a fresh expiry); the previous link stops working.
    A new link to a role that refunds or manages is a new grant: as :func:`create_invite`."""
    services.lock_for_member_change(actor)
    invite = _locked_pending(invite)
    services.check_may_manage(actor=actor, role=invite.role, action="resend the invite of")
    two_factor.check_widening(
        second_factor,
        widens=services.grants_more(before=None, role=invite.role, can_refund=invite.can_refund),
    )
    token, digest = _new_token()
    now = timezone.now()
    invite.token_sha256 = digest
    invite.sent_at = now
    invite.expires_at = now + _lifetime()
    # The new link is the resender's say (checked above): its sender, for the link's check
    # (an invite its first sender can no longer send was withdrawn, but may be resent).
    invite.invited_by = actor.user
    invite.save(update_fields=["token_sha256", "sent_at", "expires_at", "invited_by"])
    _send(invite, token, inviter=actor.user)  # before the record: as in create_invite
    _record(invite, action="invite_resend", actor=actor)
    return invite


@transaction.atomic
def revoke_invite(*, invite: MemberInvite, actor: Membership) -> MemberInvite:
    """Close ``invite``: its link stops working. Revoking twice is refused (nothing to do)."""
    services.lock_for_member_change(actor)
    invite = _locked_pending(invite)
    services.check_may_manage(actor=actor, role=invite.role, action="revoke the invite of")
    invite.revoked_at = timezone.now()
    invite.save(update_fields=["revoked_at"])
    _record(invite, action="invite_revoke", actor=actor)
    return invite


# --- the invitee's side ----------------------------------------------------------------------


@dataclass(frozen=True)
class OpenInvite:
    """A usable invite, and what accepting it takes."""

    invite: MemberInvite
    # The user the address already names, if any.
    user: Any
    # True: the address has no password yet, so accepting sets one.
    needs_password: bool


def open_invite(token: str, *, for_update: bool = False) -> OpenInvite:
    """The invite ``token`` opens, or :class:`InviteUnusable` saying why not."""
    if not token or len(token) > 100:
        raise InviteUnusable(_UNKNOWN, code="invite_unknown")
    invites = MemberInvite.objects.select_related("site", "invited_by")
    if for_update:
        invites = invites.select_for_update(of=("self",))
    invite = invites.filter(token_sha256=_sha256(token)).first()
    if invite is None:
        raise InviteUnusable(_UNKNOWN, code="invite_unknown")
    who = invite.invited_by.get_username() if invite.invited_by else "an owner or admin"
    if invite.accepted_at is not None:
        raise InviteUnusable(
            "This invitation was already used. Log in with the password you set, or use "
            "“Forgot password?” on the login page.",
            code="invite_used",
        )
    if invite.revoked_at is not None:
        raise InviteUnusable(
            f"This invitation was withdrawn. Ask {who} for a new one if you still need access.",
            code="invite_revoked",
        )
    if not _inviter_may_still(invite):
        raise InviteUnusable(
            f"This invitation was withdrawn: {who} can no longer invite you as "
            f"{Role(invite.role).label.lower()}. Ask an owner for a new one if you still need "
            "access.",
            code="invite_revoked",
        )
    if invite.expires_at <= timezone.now():
        raise InviteUnusable(
            f"This invitation expired. Ask {who} to resend it from Settings → Members.",
            code="invite_expired",
        )
    user = get_user_model().objects.filter(username=invite.email).first()
    return OpenInvite(
        invite=invite,
        user=user,
        needs_password=user is None or not user.has_usable_password(),
    )


_UNKNOWN = (
    "This invitation link is not valid: it may be mistyped, or a newer email replaced it. "
    "Use the link in the most recent invitation email, or ask for a new one."
)


@transaction.atomic
def accept_invite(*, token: str, user: Any = None, password: str | None = None) -> Membership:
    """Join the invite's site, once.

    With ``password`` (an address without one; the caller has run the password validators):
    the user is created or given that password. Otherwise ``user`` must be the signed-in user
    the address names. Writes the ``invite_accept`` record, signed by the new member.
    """
    # The site's row first, then the invite: the order of every member change (they lock the
    # site, then withdraw the invites their change takes the say from). The invite first
    # deadlocked with an inviter's removal. Checked afresh once the site is ours.
    site_id = (
        MemberInvite.objects.filter(token_sha256=_sha256(token))
        .values_list("site_id", flat=True)
        .first()
    )
    if site_id is not None:
        Site.objects.select_for_update().filter(pk=site_id).exists()
    opened = open_invite(token, for_update=True)
    invite = opened.invite
    if password is not None:
        if not opened.needs_password:
            raise SillError(
                "This address already has a Sill password: log in to accept.", code="forbidden"
            )
        member_user = opened.user
        if member_user is None:
            member_user = get_user_model().objects.create(username=invite.email, email=invite.email)
        member_user.set_password(password)
        member_user.save(update_fields=["password"])
    else:
        if user is None or opened.user is None or user.pk != opened.user.pk:
            raise SillError(
                f"This invitation is for {invite.email}: log in as that address to accept it.",
                code="forbidden",
                status=403,
            )
        member_user = user
    if Membership.objects.filter(site=invite.site, user=member_user).exists():
        raise SillError(
            f"{invite.email} is already a member of {invite.site.name}.", code="already_member"
        )
    membership = Membership.objects.create(
        site=invite.site, user=member_user, role=invite.role, can_refund=invite.can_refund
    )
    invite.accepted_at = timezone.now()
    invite.save(update_fields=["accepted_at"])
    _record(invite, action="invite_accept", actor=member_user, password_set=password is not None)
    return membership
