"""Writes to sites, members and agents.

Every change to members, agents and agent keys writes its signed audit record here, in the
same transaction (``member_change``, ``agent_change``, ``key_change``; see
:mod:`sill.accounts.admin_audit`). :func:`add_member` and :func:`add_agent_key` are the
primitives the audited functions build on; ``add_member`` alone writes no record (it also
seeds demo and test data): people join through an emailed invitation
(:mod:`sill.accounts.invites`, which uses the member rules below) and operators through
:func:`add_member_as_operator` (``manage.py members add``).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from sill.accounts import sessions, two_factor
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.admin_audit import record_admin_change, record_own_account_change
from sill.accounts.models import (
    Agent,
    AgentKey,
    AgentToken,
    MemberInvite,
    Membership,
    MemberToken,
    Role,
    Site,
)
from sill.accounts.signals import site_created
from sill.errors import PermissionDenied, SillError

logger = logging.getLogger(__name__)


@transaction.atomic
def create_site(
    *,
    name: str,
    merchant_domain: str,
    site_id: str | None = None,
    default_currency: str = "USD",
    timezone_name: str = "UTC",
) -> Site:
    """A new merchant site; apps above seed their defaults in the same transaction
    (``sill.accounts.signals.site_created``)."""
    fields: dict[str, Any] = {
        "name": name,
        "merchant_domain": merchant_domain,
        "default_currency": default_currency,
        "timezone": timezone_name,
    }
    if site_id:
        fields["id"] = site_id
    site = Site.objects.create(**fields)
    site_created.send(sender=Site, site=site)
    return site


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@transaction.atomic
def add_member(
    *, site: Site, email: str, role: str, can_refund: bool = False, password: str | None = None
) -> Membership:
    """Create (or update) the user ``email`` and make them ``role`` on ``site``.

    Writes no audit record (see the module docstring). A new ``password`` ends the user's
    sessions (the ``pre_save`` receiver of :mod:`sill.accounts.sessions`).
    """
    if role not in Role.values:
        raise SillError(f"role must be one of {', '.join(Role.values)}", code="invalid_field")
    email = email.strip().lower()
    if "@" not in email:
        raise SillError("email must be an email address", code="invalid_field", field="email")
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=email, defaults={"email": email})
    if password:
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    membership, _ = Membership.objects.update_or_create(
        user=user, site=site, defaults={"role": role, "can_refund": can_refund}
    )
    return membership


@transaction.atomic
def add_member_as_operator(
    *, site: Site, email: str, role: str, can_refund: bool = False, password: str | None = None
) -> Membership:
    """``manage.py members add``: :func:`add_member` plus its signed ``member_change`` record
    (``add``, ``role_change`` or ``password_set``; none when nothing changed)."""
    before = (
        Membership.objects.select_for_update()
        .filter(site=site, user__username=email.strip().lower())
        .first()
    )
    was = _member_state(before) if before is not None else None
    membership = add_member(
        site=site, email=email, role=role, can_refund=can_refund, password=password
    )
    now = _member_state(membership)
    if was is None:
        action = "add"
    elif was != now:
        action = "role_change"
    elif password:
        action = "password_set"
    else:
        return membership
    body: dict[str, Any] = {"action": action, "member": membership.user.get_username(), **now}
    if action == "role_change":
        body["before"] = was
    body["password_set"] = bool(password)
    _record_member_change(membership=membership, actor=None, body=body)
    if password:
        # The password is the account's, not the site's: it signs in to (and ended the
        # sessions on) every other site the account belongs to, whose logs say so too.
        record_own_account_change(membership.user, "password_set", actor=None, except_site=site)
    return membership


def _member_state(membership: Membership) -> dict[str, Any]:
    return {"role": membership.role, "can_refund": membership.can_refund}


def _record_member_change(*, membership: Membership, actor: Any, body: dict[str, Any]) -> None:
    record_admin_change(site=membership.site, kind="member_change", actor=actor, body=body)


@transaction.atomic
def add_agent_key(
    *,
    site: Site,
    agent_id: str,
    key_id: str,
    public_key: bytes,
    valid_from: datetime,
    valid_until: datetime | None = None,
    actor: Any,
    second_factor: two_factor.Freshness,
    agent_name: str | None = None,
    system: bool = False,
) -> AgentKey:
    """Register an ed25519 public key for ``agent_id`` (creating the agent if needed).

    A new agent writes an ``agent_change`` record, a new key a ``key_change`` record, both
    naming ``actor``. ``actor`` must be a member of ``site`` who manages settings, as the
    Settings → Agents page requires (403 ``forbidden``, before anything is read or written),
    unless ``system``: the operator's ``manage.py agents add-key`` and the demo seed have no
    user, say so with ``system=True`` and ``actor=None``, and their records name no actor.

    Whoever holds the key's private half signs mandates that move money: ``second_factor``
    (the view's ``two_factor.freshness``; ``two_factor.OPERATOR`` for the operator's tools)
    refuses without a code entered in the last few minutes, before anything is written.
    ``actor`` is checked in this transaction, held until it commits (``access.hold_member``).
    """
    _require_agent_manager(actor=actor, site_id=site.pk, system=system, hold=True)
    two_factor.check_widening(second_factor, widens=True)
    if len(public_key) != 32:
        raise SillError("an ed25519 public key is 32 bytes", code="invalid_field")
    if valid_until is not None and valid_until <= valid_from:
        # Said here rather than by the database's check constraint (an IntegrityError).
        raise SillError(
            "a key's valid_until must be after its valid_from",
            code="invalid_field",
            field="valid_until",
        )
    agent, agent_created = Agent.objects.get_or_create(
        site=site, agent_id=agent_id, defaults={"name": agent_name or agent_id}
    )
    if agent_created:
        record_admin_change(
            site=site,
            kind="agent_change",
            actor=actor,
            body={"action": "create", "agent_id": agent.agent_id, "name": agent.name},
        )
    key, created = AgentKey.objects.get_or_create(
        agent=agent,
        key_id=key_id,
        defaults={"public_key": public_key, "valid_from": valid_from, "valid_until": valid_until},
    )
    if not created and bytes(key.public_key) != public_key:
        raise SillError(
            f"key {key_id} of {agent_id} already exists with another public key; "
            "use a new key id to rotate",
            code="key_conflict",
        )
    if created:
        record_key_change(key=key, action="add", actor=actor, system=system)
    return key


def record_key_change(*, key: AgentKey, action: str, actor: Any, system: bool = False) -> None:
    """Write the signed ``key_change`` record for an agent key (inside the caller's transaction).

    Checks ``actor`` like :func:`add_agent_key` (a record of a change is that change's say, so
    no caller may write one in the name of a member who may not make it); ``system=True`` with
    ``actor=None`` is the operator (a management command, the demo seed)."""
    _require_agent_manager(actor=actor, site_id=key.agent.site_id, system=system)
    record_admin_change(
        site=key.agent.site,
        kind="key_change",
        actor=actor,
        body={
            "action": action,
            "agent_id": key.agent.agent_id,
            "key_id": key.key_id,
            "public_key": b64url_encode(bytes(key.public_key)),
            "valid_from": key.valid_from.isoformat(),
            "valid_until": key.valid_until.isoformat() if key.valid_until else None,
            "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
        },
    )


def _require_agent_manager(*, actor: Any, site_id: str, system: bool, hold: bool = False) -> None:
    """The role check of the agent key and token services: ``system`` is the operator (no user, and
    ``actor`` None); anyone else must manage the site's settings. ``actor=None`` alone is
    refused, so a caller cannot become the operator by forgetting who acts. ``hold``: checked
    in the caller's transaction and held until it commits (``access.hold_member``), before its
    other locks."""
    if system:
        if actor is not None:
            raise ValueError("system=True is the operator's call: pass actor=None")
        return
    if hold:
        hold_member(actor, site_id, Cap.MANAGE_SETTINGS)
    else:
        require_member(actor, site_id, Cap.MANAGE_SETTINGS)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_agent_token(
    *, agent: Agent, actor: Any, second_factor: two_factor.Freshness, system: bool = False
) -> str:
    """Create a bearer token for ``agent``; only its hash is stored, so it is shown once.

    A credential: its signed ``agent_change`` record names who issued it and its prefix.
    ``actor`` must be a member of the agent's site who manages settings (403 ``forbidden``),
    unless ``system``: the operator's ``manage.py agents token`` (and scripts seeding a site
    like it) has no user, says so with ``system=True`` and ``actor=None``, and its record names
    no actor. ``actor=None`` alone is refused, so a caller cannot become the operator by
    forgetting who acts. A token reads the agent's refunds for as long as it lives, whoever
    holds it: ``second_factor`` (``two_factor.freshness`` of the page's request;
    ``two_factor.OPERATOR`` for the operator's tools) refuses without a fresh code.

    A deactivated agent gets none (409 ``agent_deactivated``), on the page and from the
    command alike: its tokens are refused while it is off, and one issued then would work the
    moment it is reactivated, unasked for. Judged on the agent's row locked here, as
    ``set_agent_active`` locks it, so a deactivation a moment before is seen."""
    _require_agent_manager(actor=actor, site_id=agent.site_id, system=system)
    token = "sill_at_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        _require_agent_manager(actor=actor, site_id=agent.site_id, system=system, hold=True)
        locked = Agent.objects.select_for_update(of=("self",)).get(pk=agent.pk)
        if not locked.active:
            raise SillError(
                f"{agent.agent_id} is deactivated: reactivate it first (Settings → Agents), "
                "then issue its token.",
                code="agent_deactivated",
                status=409,
            )
        two_factor.check_widening(second_factor, widens=True)
        AgentToken.objects.create(agent=agent, token_sha256=token_sha256(token), prefix=token[:12])
        record_admin_change(
            site=agent.site,
            kind="agent_change",
            actor=actor,
            body={"action": "issue_token", "agent_id": agent.agent_id, "token_prefix": token[:12]},
        )
    return token


def revoke_agent_token(*, token: AgentToken, actor: Any, system: bool = False) -> AgentToken:
    """Revoke ``token`` now and write its signed ``agent_change`` record (``revoke_token``, its
    prefix): the agent API refuses it from then on (401), whether the agent is on or off and
    after it is switched back on. A token revoked already is answered as it is, nothing
    written.

    ``actor`` must be a member of the agent's site who manages settings (an owner or admin;
    403 ``forbidden`` before anything is written), unless ``system``: the operator's
    ``manage.py agents revoke-token`` says so with ``actor=None``. Not asked for a fresh
    code: like switching the agent off, it is a brake, and must work in one click."""
    _require_agent_manager(actor=actor, site_id=token.agent.site_id, system=system)
    with transaction.atomic():
        _require_agent_manager(actor=actor, site_id=token.agent.site_id, system=system, hold=True)
        # The token's row alone (as revoke_agent_key locks its key's): the agent's and the
        # site's rows stay free for the decisions and appends going on meanwhile.
        token = (
            AgentToken.objects.select_for_update(of=("self",))
            .select_related("agent__site")
            .get(pk=token.pk)
        )
        if not _mark_revoked(token):
            return token
        record_admin_change(
            site=token.agent.site,
            kind="agent_change",
            actor=actor,
            body={
                "action": "revoke_token",
                "agent_id": token.agent.agent_id,
                "token_prefix": token.prefix,
            },
        )
    logger.info(
        "agent token %s… of %s revoked on site %s by %s",
        token.prefix,
        token.agent.agent_id,
        token.agent.site_id,
        _who(actor),
    )
    return token


def _mark_revoked(token: AgentToken | MemberToken) -> bool:
    """Stamp ``token`` (its row locked by the caller) revoked now; False, and nothing
    written, when it was revoked already."""
    if token.revoked_at is not None:
        return False
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return True


def issue_member_token(
    *,
    membership: Membership,
    actor: Any,
    second_factor: two_factor.Freshness,
    system: bool = False,
) -> str:
    """Create a bearer token acting as ``membership``; only its hash is stored.

    It acts as the member (a staff member's may refund, an owner's changes rules): its signed
    ``member_change`` record names who issued it and its prefix. ``actor`` must be an owner or
    admin of the member's site who may manage that member (an admin issues no owner's token,
    which would be an owner's powers), else 403 ``forbidden`` before anything is written;
    ``system=True`` with ``actor=None`` is the operator (``manage.py members token``), and
    ``actor=None`` alone is refused, so a caller cannot become the operator by forgetting
    who acts. The token outlives the session that asked for it, as an agent's does:
    ``second_factor`` (``two_factor.OPERATOR`` for the operator's tools) refuses without a
    fresh code, nothing written."""
    token = "sill_mt_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        _check_member_token_actor(
            membership=membership, actor=actor, system=system, verb="issue", own=False
        )
        two_factor.check_widening(second_factor, widens=True)
        MemberToken.objects.create(
            membership=membership, token_sha256=token_sha256(token), prefix=token[:12]
        )
        record_admin_change(
            site=membership.site,
            kind="member_change",
            actor=actor,
            body={
                "action": "issue_token",
                "member": membership.user.get_username(),
                "token_prefix": token[:12],
            },
        )
    return token


def _check_member_token_actor(
    *, membership: Membership, actor: Any, system: bool, verb: str, own: bool
) -> None:
    """Who may ``verb`` (issue, revoke) ``membership``'s API tokens, in the caller's
    transaction: the operator (``system``, no actor), an owner or admin of its site who may
    manage that member (:func:`may_grant`: no admin an owner's), and, where ``own``, the
    member themself; anyone else is refused 403 ``forbidden``.

    Under the member-change lock with both roles re-read, so a demotion committed meanwhile
    is judged, not the roles as the caller read them."""
    if system:
        if actor is not None:
            raise ValueError("system=True is the operator's call: pass actor=None")
        lock_for_member_change(membership)
        return
    acting = require_member(
        actor, membership.site_id, Cap.OWN_ACCOUNT if own else Cap.MANAGE_SETTINGS
    )
    lock_for_member_change(membership, acting)
    if own and acting.pk == membership.pk:
        return
    if not may_grant(acting.role, membership.role):
        raise PermissionDenied(
            f"Only an owner can {verb} an owner's token."
            if acting.role == Role.ADMIN
            else f"Only owners and admins {verb} another member's tokens."
        )


def revoke_member_token(*, token: MemberToken, actor: Any, system: bool = False) -> MemberToken:
    """Revoke ``token`` now and write its signed ``member_change`` record (``revoke_token``,
    its prefix); a token revoked already is answered as it is, nothing written.

    ``actor`` is a user: the token's member themself, or an owner or admin of its site who may
    manage that member (an admin does not revoke an owner's, as they do not change or remove
    one); anyone else, a switched-off account and no user are refused 403 ``forbidden``
    before anything is written. ``system=True`` with ``actor=None`` is the operator
    (``manage.py members revoke-token``).

    Under the member-change lock, the member's role re-read, and the token's row locked: a
    refund that token asked for and that is being decided (``access.hold_member`` holds the
    row ``FOR SHARE``) is decided first, and this revocation answers once it is, so nothing
    the token asks for afterwards goes through.
    """
    if system and actor is not None:
        raise ValueError("system=True is the operator's call: pass actor=None")
    with transaction.atomic():
        try:
            token = MemberToken.objects.select_related("membership__user", "membership__site").get(
                pk=token.pk
            )
        except MemberToken.DoesNotExist:
            # Gone with its member (a removal deletes the member's tokens).
            raise SillError("That token no longer exists.", code="not_found") from None
        membership = token.membership
        _check_member_token_actor(
            membership=membership, actor=actor, system=system, verb="revoke", own=True
        )
        token = MemberToken.objects.select_for_update().get(pk=token.pk)
        token.membership = membership
        if not _mark_revoked(token):
            return token
        _record_member_change(
            membership=membership,
            actor=actor,
            body={
                "action": "revoke_token",
                "member": membership.user.get_username(),
                "token_prefix": token.prefix,
            },
        )
    logger.info(
        "member token %s… of %s revoked on site %s by %s",
        token.prefix,
        membership.user.get_username(),
        membership.site_id,
        _who(actor),
    )
    return token


# --- Settings → Members: the rules for who may change whom -----------------------------------
#
# ``actor`` is the acting user's membership on the same site. Only an owner may grant, change
# or remove the owner role; an admin manages admins, reviewers and staff. A site never loses
# its last owner, and nobody changes or removes their own membership (another owner or admin
# must). Each function refuses with a SillError before writing anything.


def lock_for_member_change(*memberships: Membership) -> None:
    """Serialise member changes on a site and re-read the roles the rules depend on.

    Locking the site row means two owners demoting each other at the same moment run one
    after the other, so the second sees the first's change and the site keeps an owner.

    ``FOR NO KEY UPDATE``: it serialises member changes as ``FOR UPDATE`` would, but not the
    rows that merely reference the site (PostgreSQL's foreign-key checks take ``FOR KEY
    SHARE``), so an agent's decision, a refund or a webhook of the site never waits for a
    member change (an invitation's email is sent under this lock).
    """
    site_ids = {m.site_id for m in memberships}
    Site.objects.select_for_update(no_key=True).filter(pk__in=site_ids).order_by("pk").exists()
    for membership in memberships:
        try:
            membership.refresh_from_db(fields=["role", "can_refund"])
        except Membership.DoesNotExist:
            raise SillError("That member was removed meanwhile.", code="not_found") from None


def may_grant(actor_role: str, role: str) -> bool:
    """Whether a member whose role is ``actor_role`` may give (invite to, make someone)
    ``role``: owners any role, admins any but owner, others none."""
    if actor_role not in (Role.OWNER, Role.ADMIN):
        return False
    return role != Role.OWNER or actor_role == Role.OWNER


def check_may_manage(*, actor: Membership, role: str, action: str) -> None:
    if actor.role not in (Role.OWNER, Role.ADMIN):
        raise SillError("Only owners and admins manage members.", code="forbidden", status=403)
    if not may_grant(actor.role, role):
        raise SillError(f"Only an owner can {action} an owner.", code="forbidden", status=403)


def record_invite_change(invite: MemberInvite, *, action: str, actor: Any, **extra: Any) -> None:
    """The signed ``member_change`` record of an invite's ``action`` (sill.accounts.invites)."""
    body = {
        "action": action,
        "invite_id": invite.pk,
        "member": invite.email,
        "role": invite.role,
        "can_refund": invite.can_refund,
        "expires_at": invite.expires_at.isoformat(),
        **extra,
    }
    record_admin_change(site=invite.site, kind="member_change", actor=actor, body=body)


def _withdraw_invites(*, membership: Membership, role: str | None, actor: Membership) -> None:
    """Revoke the open invites ``membership``'s user sent on its site that their role there
    is now ``role`` (None: no longer a member) could not send, each with an
    ``invite_revoke`` record (reason ``inviter_lost_role``) by ``actor``, in the caller's
    transaction.

    An invite is the inviter's say, used later: once an owner takes an admin's access away,
    the address that admin invited must not still become an admin. ``invites.open_invite``
    checks the inviter again when the link is used (an account switched off elsewhere).
    """
    pending = (
        MemberInvite.objects.select_for_update()
        .select_related("site")
        .filter(
            site_id=membership.site_id,
            invited_by=membership.user,
            accepted_at=None,
            revoked_at=None,
        )
        .order_by("pk")
    )
    for invite in pending:
        if role is not None and may_grant(role, invite.role):
            continue
        invite.revoked_at = timezone.now()
        invite.save(update_fields=["revoked_at"])
        record_invite_change(
            invite, action="invite_revoke", actor=actor, reason="inviter_lost_role"
        )


def _check_not_last_owner(*, membership: Membership, action: str) -> None:
    if membership.role != Role.OWNER:
        return
    owners = Membership.objects.filter(site_id=membership.site_id, role=Role.OWNER).count()
    if owners <= 1:
        raise SillError(
            f"You can't {action} the last owner of {membership.site.name}. "
            "Make someone else an owner first.",
            code="last_owner",
        )


def _check_not_self(*, membership: Membership, actor: Membership, message: str) -> None:
    if membership.pk == actor.pk:
        raise SillError(message, code="forbidden", status=403)


def _money_powers(role: str, can_refund: bool) -> frozenset[str]:
    """What a membership of ``role`` lets its person do with the site's money."""
    if role == Role.OWNER:
        return frozenset({"refund", "manage", "owners"})
    if role == Role.ADMIN:
        return frozenset({"refund", "manage"})
    return frozenset({"refund"}) if role == Role.STAFF and can_refund else frozenset()


def grants_more(*, before: tuple[str, bool] | None, role: str, can_refund: bool) -> bool:
    """Whether ``role`` (``can_refund`` for staff) lets someone do with the site's money what
    ``before`` (their role and can_refund; None: not a member) did not: refund (staff who can
    refund, admins, owners), decide held refunds and change rules, agents and rails (admins,
    owners), manage owners (owners). Such a grant needs a fresh code where the site requires
    two factors: a stolen session must not add or promote its thief, who would then make every
    other change with codes of their own."""
    had = _money_powers(*before) if before is not None else frozenset()
    return bool(_money_powers(role, can_refund) - had)


@transaction.atomic
def change_member_role(
    *,
    membership: Membership,
    actor: Membership,
    role: str,
    can_refund: bool = False,
    second_factor: two_factor.Freshness,
) -> Membership:
    """Give ``membership`` a new ``role``; ``can_refund`` is kept only for staff.

    A change that :func:`grants_more` is refused by ``second_factor`` (the view's
    ``two_factor.freshness``) without a fresh code, nothing written."""
    if role not in Role.values:
        raise SillError(
            f"Role must be one of {', '.join(Role.values)}.", code="invalid_field", field="role"
        )
    lock_for_member_change(membership, actor)
    check_may_manage(actor=actor, role=membership.role, action="change")
    check_may_manage(actor=actor, role=role, action="make someone")
    if role != Role.OWNER:
        _check_not_last_owner(membership=membership, action="demote")
    _check_not_self(
        membership=membership,
        actor=actor,
        message="You can't change your own role; ask another owner or admin.",
    )
    two_factor.check_widening(
        second_factor,
        widens=grants_more(
            before=(membership.role, membership.can_refund),
            role=role,
            can_refund=role == Role.STAFF and can_refund,
        ),
    )
    before = _member_state(membership)
    membership.role = role
    membership.can_refund = role == Role.STAFF and can_refund
    if _member_state(membership) == before:
        return membership  # nothing changed: nothing to record
    membership.save(update_fields=["role", "can_refund"])
    _record_member_change(
        membership=membership,
        actor=actor,
        body={
            "action": "role_change",
            "member": membership.user.get_username(),
            "before": before,
            **_member_state(membership),
        },
    )
    _withdraw_invites(membership=membership, role=role, actor=actor)
    return membership


@transaction.atomic
def remove_member(*, membership: Membership, actor: Membership) -> None:
    """Take ``membership`` off its site; the user account and its other sites stay.

    A user left with no site at all is signed out everywhere at once. One who keeps another
    site keeps their sessions: every request resolves the memberships afresh
    (``access.site_context``), so this site is out of their reach from the next request on.
    """
    lock_for_member_change(membership, actor)
    check_may_manage(actor=actor, role=membership.role, action="remove")
    _check_not_last_owner(membership=membership, action="remove")
    _check_not_self(
        membership=membership,
        actor=actor,
        message="You can't remove yourself; ask another owner or admin.",
    )
    user = membership.user
    body: dict[str, Any] = {
        "action": "remove",
        "member": user.get_username(),
        **_member_state(membership),
    }
    site = membership.site
    membership.delete()
    ended = 0
    if not Membership.objects.filter(user=user).exists():
        ended = sessions.end_sessions(user=user)
    body["sessions_ended"] = ended
    record_admin_change(site=site, kind="member_change", actor=actor, body=body)
    _withdraw_invites(membership=membership, role=None, actor=actor)


# --- Settings → Agents (the page's services; the command-line ones are above) ---------------
#
# Each first checks that ``actor`` is a member of the agent's site whose role manages settings
# (``require_member``, 403 ``forbidden``), as the Settings → Agents views do: an agent's keys,
# switch and caps say who may spend the site's money, so no other caller may change them for a
# member who may not. Each checks again first in its transaction (``hold_member``), held until
# it commits: an owner's removal or demotion of ``actor`` that came first (it may have waited
# for the audit chain behind another append) refuses the change, one that comes later waits
# for it. The member's rows, then the agent's or the key's, then the chain head.

_AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
_PUBLIC_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{43}=?$")


def register_agent_key(
    *,
    site: Site,
    actor: Any,
    agent_id: str,
    key_id: str,
    public_key_b64url: str,
    valid_from: datetime,
    valid_until: datetime | None = None,
    second_factor: two_factor.Freshness,
) -> AgentKey:
    """Add a new key from the settings page; unlike :func:`add_agent_key`, an existing key id
    (revoked or not) is refused, so re-adding can never look like it revived a revoked key.
    ``second_factor`` refuses a session without a fresh code first, as :func:`add_agent_key`
    does: before the input is judged, so the page asks for the code, then for corrections."""
    require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    two_factor.check_widening(second_factor, widens=True)
    agent_id, key_id, public_key_b64url = (
        agent_id.strip(),
        key_id.strip(),
        public_key_b64url.strip(),
    )
    if not _AGENT_ID_RE.match(agent_id):
        raise SillError(
            "An agent id is 1 to 100 letters, digits or _ . : - (e.g. agent_acme_shopper).",
            code="invalid_field",
            field="agent_id",
        )
    if not _AGENT_ID_RE.match(key_id):
        raise SillError(
            "A key id is 1 to 100 letters, digits or _ . : - (e.g. key-2026-01).",
            code="invalid_field",
            field="key_id",
        )
    if not _PUBLIC_KEY_RE.match(public_key_b64url):
        raise SillError(
            "The public key must be 32 bytes in base64url: 43 letters, digits, - or _.",
            code="invalid_field",
            field="public_key",
        )
    if valid_until is not None and valid_until <= valid_from:
        raise SillError(
            "“Valid until” must be after “valid from”.", code="invalid_field", field="valid_until"
        )
    with transaction.atomic():
        if AgentKey.objects.filter(
            agent__site=site, agent__agent_id=agent_id, key_id=key_id
        ).exists():
            raise SillError(
                f"{agent_id} already has a key {key_id}; use a new key id to add or rotate a key.",
                code="key_conflict",
                field="key_id",
            )
        key = add_agent_key(
            site=site,
            agent_id=agent_id,
            key_id=key_id,
            public_key=b64url_decode(public_key_b64url.rstrip("=")),
            valid_from=valid_from,
            valid_until=valid_until,
            actor=actor,
            second_factor=second_factor,
        )
    logger.info("agent key %s/%s added on site %s by %s", agent_id, key_id, site.pk, _who(actor))
    return key


def revoke_agent_key(*, key: AgentKey, actor: Any) -> AgentKey:
    """Revoke ``key`` now and write its ``key_change`` record; revoking twice changes nothing.

    Mandates signed with it are refused from then on, and the refunds and credits its
    policy approved under it that are not sent yet are not sent
    (``refunds.execution.key_revoked_refusal``); its held ones wait for a person."""
    require_member(actor, key.agent.site_id, Cap.MANAGE_SETTINGS)
    with transaction.atomic():
        hold_member(actor, key.agent.site_id, Cap.MANAGE_SETTINGS)
        # The key's row alone: a lock joined to the site's row FOR UPDATE, held until this
        # appends, deadlocks with any append of the site committing meanwhile (its foreign
        # keys' check share-locks that row while it holds the chain head).
        key = (
            AgentKey.objects.select_for_update(of=("self",))
            .select_related("agent__site")
            .get(pk=key.pk)
        )
        if key.revoked_at is not None:
            return key
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        record_key_change(key=key, action="revoke", actor=actor)
    logger.info(
        "agent key %s/%s revoked on site %s by %s",
        key.agent.agent_id,
        key.key_id,
        key.agent.site_id,
        _who(actor),
    )
    return key


def set_agent_active(
    *, agent: Agent, actor: Any, active: bool, second_factor: two_factor.Freshness
) -> Agent:
    """Switch an agent on or off: an inactive agent's mandates and tokens are refused, and
    the refunds and credits its policy approved that are not sent yet are not sent
    (``refunds.execution.agent_deactivated_refusal``); its held ones wait for a person.

    A real switch writes its ``agent_change`` record; switching to the state it is in
    changes and records nothing. Reactivating lets the agent's keys sign mandates again, so
    ``second_factor`` (the view's ``two_factor.freshness``; ``two_factor.OPERATOR`` for an
    operator's tool) refuses it without a fresh code, judged on the row as locked here: a
    stolen session must not undo the owner's brake. Deactivating never needs one.
    """
    require_member(actor, agent.site_id, Cap.MANAGE_SETTINGS)
    with transaction.atomic():
        hold_member(actor, agent.site_id, Cap.MANAGE_SETTINGS)
        locked = (
            Agent.objects.select_for_update(of=("self",)).select_related("site").get(pk=agent.pk)
        )
        two_factor.check_widening(second_factor, widens=active and not locked.active)
        if locked.active == active:
            agent.active = active
            return agent
        locked.active = active
        locked.save(update_fields=["active"])
        record_admin_change(
            site=locked.site,
            kind="agent_change",
            actor=actor,
            body={
                "action": "reactivate" if active else "deactivate",
                "agent_id": locked.agent_id,
            },
        )
    agent.active = active
    logger.info(
        "agent %s %s on site %s by %s",
        agent.agent_id,
        "reactivated" if active else "deactivated",
        agent.site_id,
        _who(actor),
    )
    return agent


def set_agent_refunds(
    *,
    agent: Agent,
    actor: Any,
    enabled: bool,
    cap_minor: int | None,
    daily_cap_minor: int | None,
    second_factor: two_factor.Freshness,
) -> Agent:
    """Switch the agent's refund method and set its caps (site currency minor units; None is
    no cap). A change writes one ``agent_change`` record; no change writes nothing.

    ``second_factor`` (the view's ``two_factor.freshness``; ``two_factor.OPERATOR`` for an
    operator's tool) refuses, nothing written, when the change lets the agent refund more than
    it may now and no code was entered in the last few minutes: the method switched on, or a
    cap raised or lifted, even alongside a narrowing. Switching off and lowering caps never
    raise it: they are the brake on an agent whose key leaked. Compared with the row as locked
    here, not as a page showed it: a form posting the old values after an owner lowered a
    cap is a raise."""
    require_member(actor, agent.site_id, Cap.MANAGE_SETTINGS)
    for value in (cap_minor, daily_cap_minor):
        if value is not None and not 0 <= value <= 10**12:
            raise SillError("A cap is between 0 and 10,000,000,000.", code="invalid_field")
    with transaction.atomic():
        hold_member(actor, agent.site_id, Cap.MANAGE_SETTINGS)
        locked = (
            Agent.objects.select_for_update(of=("self",)).select_related("site").get(pk=agent.pk)
        )
        before = (locked.refund_enabled, locked.refund_cap_minor, locked.daily_refund_cap_minor)
        after = (enabled, cap_minor, daily_cap_minor)
        two_factor.check_widening(second_factor, widens=_refunds_widen(before, after))
        if before != after:
            locked.refund_enabled, locked.refund_cap_minor, locked.daily_refund_cap_minor = after
            locked.save(
                update_fields=["refund_enabled", "refund_cap_minor", "daily_refund_cap_minor"]
            )
            record_admin_change(
                site=locked.site,
                kind="agent_change",
                actor=actor,
                body={
                    "action": "set_refunds",
                    "agent_id": locked.agent_id,
                    "refund_enabled": enabled,
                    "refund_cap_minor": cap_minor,
                    "daily_refund_cap_minor": daily_cap_minor,
                    "currency": locked.site.default_currency,
                },
            )
    return locked


def _refunds_widen(
    before: tuple[bool, int | None, int | None], after: tuple[bool, int | None, int | None]
) -> bool:
    """Whether refund settings ``after`` (on, cap, daily cap; None is no cap) let an agent
    refund more than ``before`` do. A cap raised while the method is off counts too: it
    takes effect the moment someone switches the method back on."""
    (was_on, *was_caps), (now_on, *now_caps) = before, after
    if now_on and not was_on:
        return True
    return any(
        old is not None and (new is None or new > old)
        for old, new in zip(was_caps, now_caps, strict=True)
    )


def _who(actor: Any) -> str:
    return actor.get_username() if actor is not None else "system"
