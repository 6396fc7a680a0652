"""Writes to a site's Slack setup (Settings → Slack): where held refunds are posted, the app's
signing secret (it verifies the Approve / Reject clicks) and bot token (it asks Slack who a
Slack user is), and which Slack user is which member.

Owners and admins (``require_member``, Cap.MANAGE_SETTINGS, 403 ``forbidden``); but what lets
a click speak for a member who decides is the owners' alone: the signing secret (whoever holds
it can sign a click from any linked user), the bot token (Slack's answers with it confirm the
links) and the links of owners and admins other than oneself (an admin linking an owner to the
admin's own Slack user would approve, from Slack, as that owner, past "whoever asked cannot
approve"). An admin may link themselves and members who cannot decide. The service reads
those rules from the membership ``require_member`` returns, not from its caller, so a caller
other than the page (a script, an API, a task) cannot act beyond the member's role: an admin
asking for an owner's change is refused 403 ``forbidden`` (:class:`SlackOwnersOnly`) with
nothing of the save written.

Whoever may set a link, it takes effect only when Slack confirms the Slack user is that member:
``users.info`` with the site's bot token must answer a profile whose email is the member's
(:mod:`refunds.review.slack_users`). Otherwise (another person's Slack user, no bot token,
Slack unreachable) the link is refused beside its box and nothing of the save is written: a
click decides as the member, so no one links a member to a Slack user on their own word.
A confirmed link is stamped ``slack_checked_at`` and the workspace Slack says the user is of
(``slack_team_id``: clicks from another workspace decide nothing); removing a link needs no
confirmation. Links made before Sill asked Slack are unconfirmed (their clicks decide
nothing): a save that sends one back is also asked of Slack and confirms it if Slack says so
(never refused for it: the saver may not be able to change it), and
:mod:`refunds.review.slack_link_checks` asks Slack about the rest, and again about confirmed
links every day.

The signing secret, the bot token and the webhook URL are secrets: they are sealed at rest,
never logged, never returned and never in the audit record. Every save that changes
something is one signed ``settings_change`` record naming what changed, written in the save's
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from refunds.review import slack
from refunds.review.slack_users import (
    SlackUser,
    SlackUserUnconfirmed,
    is_members_email,
    slack_user,
)
from sill import errors
from sill.accounts.access import Cap, can, require_member
from sill.accounts.models import Membership, Role, Site

SLACK_USER_RE = re.compile(r"\A[UW][A-Z0-9]{2,31}\Z")
WEBHOOK_RE = re.compile(r"\Ahttps://hooks\.slack\.com/services/[A-Za-z0-9/_-]{10,200}\Z")
SECRET_RE = re.compile(r"\A[0-9a-f]{32}\Z")
BOT_TOKEN_RE = re.compile(r"\Axoxb-[A-Za-z0-9-]{10,250}\Z")

OWNERS_ONLY_SECRET = "Only an owner can set or remove the signing secret: it signs every click."
OWNERS_ONLY_LINK = (
    "Only an owner can change which Slack user is another owner or admin: a click from that "
    "user decides as them."
)
OWNERS_ONLY_TOKEN = (
    "Only an owner can set or remove the bot token: Slack's answers with it decide who is who."
)
LINKED_TWICE = "Each Slack user can be linked to one member only."
LINKED_MEANWHILE = "That Slack user is already linked to another member."


class SlackSettingsRefused(errors.SillError):
    """A save that wrote nothing. ``field_errors`` maps each field the page shows
    (``webhook_url``, ``signing_secret``, ``slack_<membership id>``, ``members`` for the links
    as a whole) to its words, so each is shown beside its field; ``message`` and ``field``
    are one of them, for callers that show one error."""

    code = "invalid_field"
    status = 422

    def __init__(self, field_errors: dict[str, str], *, field: str | None = None) -> None:
        field = field if field is not None else next(iter(field_errors))
        super().__init__(field_errors[field], field=field)
        self.field_errors = dict(field_errors)


class SlackOwnersOnly(SlackSettingsRefused, errors.PermissionDenied):
    """A non-owner's save asking what only an owner may change (module doc): 403 forbidden.
    ``field_errors`` holds every error of the save, the owners-only ones among them."""

    code = "forbidden"
    status = 403


def save_slack_settings(
    *,
    site: Site,
    actor: Any,
    webhook_url: str = "",
    clear_webhook: bool = False,
    signing_secret: str = "",
    clear_secret: bool = False,
    bot_token: str = "",
    clear_bot_token: bool = False,
    links: Mapping[int, str] | None = None,
) -> list[str]:
    """Change ``site``'s Slack setup as ``actor``; returns what changed, in words.

    An empty ``webhook_url``, ``signing_secret`` or ``bot_token`` leaves the one set alone (the
    page never shows them back); ``clear_webhook`` / ``clear_secret`` / ``clear_bot_token``
    remove it. ``links`` maps a membership id of ``site`` to its Slack member ID ("" unlinks);
    members left out keep theirs. A new link is asked of Slack first (with the bot token of
    this save, else the one set); so is a link sent back unchanged that Slack has not
    confirmed (made before Sill asked), which is confirmed when Slack says it is the member's
    and otherwise left unconfirmed, never refused. Refused, with nothing written:
    :class:`SlackSettingsRefused` (422) for input Sill does not accept or a link Slack does not
    confirm, :class:`SlackOwnersOnly` (403) for an owner's change asked by an admin,
    ``errors.PermissionDenied`` for a role that does not manage settings and
    ``errors.NotFound`` for a membership of another site.
    """
    checked = require_member(actor, site.pk, Cap.MANAGE_SETTINGS)
    webhook = webhook_url.strip()
    secret = signing_secret.strip()
    token = bot_token.strip()
    wanted = {pk: value.strip().upper() for pk, value in (links or {}).items()}
    # Slack is asked before the site is locked: its answer may take seconds, and member
    # changes wait on that lock. The answers are checked against the locked rows below.
    answers = _ask_slack(
        site=site,
        token="" if clear_bot_token else (token if _owner_token(checked, token) else None),
        wanted=wanted,
    )
    try:
        with transaction.atomic():
            # Member changes lock the site row too (lock_for_member_change): the links and
            # roles read next, the actor's own included, stay as read until this commits.
            locked = Site.objects.select_for_update(no_key=True).get(pk=site.pk)
            members = list(
                Membership.objects.select_for_update(of=("self",))
                .filter(site=site)
                .select_related("user")
                .order_by("role", "user__username")
            )
            membership = next((m for m in members if m.pk == checked.pk), None)
            if membership is None or not can(membership, Cap.MANAGE_SETTINGS):
                # Removed or demoted between require_member and the lock.
                raise errors.PermissionDenied("Your role on this site does not allow this.")
            if set(wanted) - {m.pk for m in members}:
                raise errors.NotFound("No such member on this site.")
            _refuse_what_may_not_be_saved(
                membership=membership,
                members=members,
                webhook=webhook,
                secret=secret,
                clear_secret=clear_secret,
                token=token,
                clear_token=clear_bot_token,
                wanted=wanted,
                answers=answers,
            )
            return _write(
                site=site,
                locked=locked,
                actor=actor,
                members=members,
                webhook=webhook,
                clear_webhook=clear_webhook,
                secret=secret,
                clear_secret=clear_secret,
                token=token,
                clear_token=clear_bot_token,
                wanted=wanted,
                answers=answers,
            )
    except IntegrityError:
        # The unique constraint on a site's Slack users refused a link saved meanwhile by a
        # writer that did not wait for the site's lock: the whole save is undone.
        raise SlackSettingsRefused({"members": LINKED_MEANWHILE}) from None


def _owner_token(checked: Membership, token: str) -> bool:
    """Whether Slack is asked with the bot token of this save: an owner's, well formed (an
    admin's is refused below, so Slack is not asked on its word)."""
    return checked.role == Role.OWNER and bool(BOT_TOKEN_RE.match(token))


# What Slack said of a Slack user: their profile's email and workspace, or why it did not say.
SlackAnswer = SlackUser | SlackUserUnconfirmed


def _ask_slack(*, site: Site, token: str | None, wanted: dict[int, str]) -> dict[str, SlackAnswer]:
    """What Slack says of each Slack user this save links anew, or sends back unchanged while
    Slack has not confirmed it (``token`` None: the site's bot token). Ids that are not Slack
    member IDs are left to the checks under the lock."""
    current = {
        pk: (slack_user_id, checked_at is not None)
        for pk, slack_user_id, checked_at in Membership.objects.filter(
            site=site, pk__in=list(wanted)
        ).values_list("pk", "slack_user_id", "slack_checked_at")
    }
    asked = {
        value
        for pk, value in wanted.items()
        if value and current.get(pk, (value, True)) != (value, True) and SLACK_USER_RE.match(value)
    }
    if not asked:
        return {}
    if token is None:
        token = slack.bot_token(site)
    answers: dict[str, SlackAnswer] = {}
    for slack_user_id in sorted(asked):
        try:
            answers[slack_user_id] = slack_user(token=token, slack_user_id=slack_user_id)
        except SlackUserUnconfirmed as unconfirmed:
            answers[slack_user_id] = unconfirmed
    return answers


def _unconfirmed(*, member: Membership, value: str, answers: dict[str, SlackAnswer]) -> str:
    """Why Slack's answer does not link ``value`` to ``member``; "" when it does."""
    answer = answers.get(value)
    if answer is None:
        # The link was changed meanwhile by another save, after Slack was asked.
        return "Another save changed this link meanwhile; save again."
    if isinstance(answer, SlackUserUnconfirmed):
        return str(answer)
    email = (member.user.email or "").strip()
    if not is_members_email(slack_email=answer.email, member_email=email):
        return (
            f"Slack's profile of {value} does not have the email {email or 'of this member'}: "
            "a member is linked only to their own Slack user. Nothing was linked."
        )
    return ""


def _refuse_what_may_not_be_saved(
    *,
    membership: Membership,
    members: list[Membership],
    webhook: str,
    secret: str,
    clear_secret: bool,
    token: str,
    clear_token: bool,
    wanted: dict[int, str],
    answers: dict[str, SlackAnswer],
) -> None:
    """Every error of the save at once, in the page's order of fields."""
    field_errors: dict[str, str] = {}
    if webhook and not WEBHOOK_RE.match(webhook):
        field_errors["webhook_url"] = (
            "An incoming webhook URL starts https://hooks.slack.com/services/."
        )
    if secret and not SECRET_RE.match(secret):
        field_errors["signing_secret"] = "A Slack signing secret is 32 lowercase hex characters."
    if token and not BOT_TOKEN_RE.match(token):
        field_errors["bot_token"] = "A Slack bot token starts xoxb- (OAuth & Permissions)."
    for member in members:
        value = wanted.get(member.pk, "")
        if value and not SLACK_USER_RE.match(value):
            field_errors[f"slack_{member.pk}"] = "A Slack member ID looks like U04ABCDE12."
        elif value and value != member.slack_user_id:
            refused = _unconfirmed(member=member, value=value, answers=answers)
            if refused:
                field_errors[f"slack_{member.pk}"] = refused
    owners_only = _owners_only(
        membership=membership,
        members=members,
        asks_secret=bool(secret) or clear_secret,
        asks_token=bool(token) or clear_token,
        wanted=wanted,
    )
    field_errors.update(owners_only)
    taken = [wanted.get(m.pk, m.slack_user_id) for m in members]
    taken = [v for v in taken if v]
    if len(taken) != len(set(taken)):
        field_errors["members"] = LINKED_TWICE
    if owners_only:
        raise SlackOwnersOnly(field_errors, field=next(iter(owners_only)))
    if field_errors:
        raise SlackSettingsRefused(field_errors)


def _owners_only(
    *,
    membership: Membership,
    members: list[Membership],
    asks_secret: bool,
    asks_token: bool,
    wanted: dict[int, str],
) -> dict[str, str]:
    """What a non-owner's save asks that only an owner may change (module doc)."""
    if membership.role == Role.OWNER:
        return {}
    refused: dict[str, str] = {}
    if asks_secret:
        refused["signing_secret"] = OWNERS_ONLY_SECRET
    if asks_token:
        refused["bot_token"] = OWNERS_ONLY_TOKEN
    for member in members:
        decides = member.role in (Role.OWNER, Role.ADMIN)
        other = member.pk != membership.pk
        changes = wanted.get(member.pk, member.slack_user_id) != member.slack_user_id
        if decides and other and changes:
            refused[f"slack_{member.pk}"] = OWNERS_ONLY_LINK
    return refused


def _write(
    *,
    site: Site,
    locked: Site,
    actor: Any,
    members: list[Membership],
    webhook: str,
    clear_webhook: bool,
    secret: str,
    clear_secret: bool,
    token: str,
    clear_token: bool,
    wanted: dict[int, str],
    answers: dict[str, SlackAnswer],
) -> list[str]:
    changed: list[str] = []
    if clear_webhook and locked.slack_webhook_sealed:
        locked.slack_webhook_sealed = b""
        changed.append("webhook cleared")
    elif webhook and webhook != slack.webhook_url(locked):
        locked.slack_webhook_sealed = slack.seal_webhook_url(locked, webhook)
        changed.append("webhook set")
    if clear_secret and locked.slack_signing_secret:
        locked.slack_signing_secret = b""
        changed.append("signing secret cleared")
    elif secret:
        locked.slack_signing_secret = slack.seal_signing_secret(locked, secret)
        changed.append("signing secret set")
    if clear_token and locked.slack_bot_token_sealed:
        locked.slack_bot_token_sealed = b""
        changed.append("bot token cleared")
    elif token:
        locked.slack_bot_token_sealed = slack.seal_bot_token(locked, token)
        changed.append("bot token set")
    if clear_token or token:
        # Slack's refusal was of the token this replaces (or removes): the next check asks
        # with the new one.
        locked.slack_token_refused = ""
        locked.slack_token_refused_at = None
    if changed:
        fields = [
            "slack_webhook_sealed", "slack_signing_secret", "slack_bot_token_sealed",
            "slack_token_refused", "slack_token_refused_at",
        ]  # fmt: skip
        locked.save(update_fields=fields)
        for field in fields:
            setattr(site, field, getattr(locked, field))
    links: list[dict[str, str | bool | None]] = []
    for member in members:
        value = wanted.get(member.pk, member.slack_user_id)
        answer = answers.get(value)
        if value != member.slack_user_id:
            # A new link was confirmed by Slack (_refuse_what_may_not_be_saved refused any
            # other), so it takes effect at once, in the workspace Slack said it is of.
            member.slack_user_id = value
            member.slack_checked_at = timezone.now() if value else None
            member.slack_team_id = answer.team_id if isinstance(answer, SlackUser) else ""
            member.slack_link_why = ""  # the check's word was about the link this replaces
            member.save(
                update_fields=[
                    "slack_user_id",
                    "slack_checked_at",
                    "slack_team_id",
                    "slack_link_why",
                ]
            )
            links.append({"member": member.user.get_username(), "slack_user_id": value or None})
        elif (
            value
            and member.slack_checked_at is None
            and isinstance(answer, SlackUser)
            and _confirms(member, answer)
        ):
            # A link made before Sill asked Slack, sent back unchanged, that Slack confirms.
            # One Slack does not confirm is left as it is (its clicks decide nothing) for
            # refunds.review.slack_link_checks, not refused: the save may be another
            # member's, about something else, who cannot change this link.
            member.slack_checked_at = timezone.now()
            member.slack_team_id = answer.team_id
            member.slack_link_why = ""
            member.save(update_fields=["slack_checked_at", "slack_team_id", "slack_link_why"])
            links.append(
                {"member": member.user.get_username(), "slack_user_id": value, "confirmed": True}
            )
    if changed or links:
        append_record(
            site=site,
            kind=AuditKind.SETTINGS_CHANGE,
            body={
                "change": "slack",
                "actor": actor.get_username(),
                "changed": changed,
                "slack_users": links,
            },
        )
    return changed + [f"Slack user of {link['member']} {_done(link)}" for link in links]


def _confirms(member: Membership, answer: SlackUser) -> bool:
    """Whether Slack's answer is the member's email."""
    email = member.user.email or ""
    return is_members_email(slack_email=answer.email, member_email=email)


def _done(link: dict[str, str | bool | None]) -> str:
    if link.get("confirmed"):
        return "confirmed"
    return "set" if link["slack_user_id"] else "cleared"
