"""Asking Slack again about Sill's Slack links: those Slack has not confirmed (made before
Settings → Slack asked Slack who a Slack user is, :mod:`refunds.review.slack_setup`, or
confirmed once and no longer), and, every day, those it has.

Until then an admin could link their membership to anyone's Slack user, and a click from that
user decides as the member; so a link with no ``Membership.slack_checked_at`` decides nothing
(:mod:`refunds.review.slack`) until this check, the beat task ``refunds.slack_check_links``,
asks Slack about it. A confirmed link is Slack's word on the day it was given: the Slack user
may since have been deactivated, made a guest, or given another email, and would still decide
as the member. So each run also asks again about up to ``RECHECKS_PER_SITE`` confirmed links
of each site, those without a recorded workspace first (confirmed before Sill recorded it:
their clicks are refused until it is), then those asked longest ago, once ``RECHECK_AFTER``
has passed.

For each site with a bot token, each link is asked of ``users.info``
(:mod:`refunds.review.slack_users`) outside any lock (Slack may take seconds), then, under the
site's lock as Settings → Slack saves, a link still as it was asked is

- confirmed (``slack_checked_at``, and ``slack_team_id``: the workspace Slack says the user is
  of) when Slack vouches for the user and the email on the profile is the member's; a
  confirmed link is stamped again;
- cleared when it is another email: the Slack user is someone else, whose clicks would
  decide as the member;
- unconfirmed, when it was confirmed, if Slack says no longer (no such user, a deactivated
  user, a guest, no email shared, an email Slack has not confirmed): its clicks decide nothing
  from then on, and it is asked again on each run;
- left as it was otherwise (the token refused, Slack unreachable or failing, an answer that
  says nothing of the user): an outage does not take every link away, and the next run asks
  again.

Each site's confirmations, clearings and unconfirmations are one signed ``settings_change``
record, in the same shape as a save of Settings → Slack, written in the same transaction. A
confirmed link stamped again (its workspace filled in or unchanged) is not a change of who is
who and writes none. The bot token is never logged (slack_users logs Slack's error code only).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Q, QuerySet, Value, When
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
from sill.accounts.models import Membership, Site

logger = logging.getLogger(__name__)

CLEARED_WHY = "Slack's profile of this Slack user has another email than the member's"
# A day: a deactivated or demoted Slack user stops deciding within a day (and a run), without
# asking Slack about every link every 15 minutes.
RECHECK_AFTER = timedelta(days=1)
# Each run asks again about this many of a site's confirmed links at most (users.info allows
# 100+ a minute; a run every 15 minutes asks 4,800 a day, past what any site links). Bounded
# per site, not across sites: a site whose token Slack refuses keeps its links due, and would
# otherwise hold every other site's re-checks back.
RECHECKS_PER_SITE = 50


@dataclass(frozen=True)
class LinkCheck:
    """What one check did to the links it asked about."""

    confirmed: int = 0
    cleared: int = 0
    unconfirmed: int = 0  # unconfirmed links left as they were, asked again next time
    rechecked: int = 0  # confirmed links Slack still vouches for, stamped again
    revoked: int = 0  # confirmed links Slack no longer vouches for, now unconfirmed

    def __add__(self, other: LinkCheck) -> LinkCheck:
        return LinkCheck(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


# What Slack said of a link: the Slack user asked about, the link's slack_checked_at when it
# was read, and Slack's answer.
_Asked = tuple[str, datetime | None, SlackUser | SlackUserUnconfirmed]


def links_to_check(*, now: datetime) -> dict[str, list[Membership]]:
    """The links this run asks about, by site, of sites with a bot token: every unconfirmed
    one, and up to ``RECHECKS_PER_SITE`` confirmed ones due of each site (module doc)."""
    linked = Membership.objects.exclude(slack_user_id="").exclude(site__slack_bot_token_sealed=b"")
    due = linked.filter(slack_checked_at__isnull=False).filter(
        Q(slack_team_id="") | Q(slack_checked_at__lt=now - RECHECK_AFTER)
    )
    by_site: dict[str, list[Membership]] = defaultdict(list)
    for member in linked.filter(slack_checked_at__isnull=True).order_by("pk"):
        by_site[member.site_id].append(member)
    for site_id in due.values_list("site_id", flat=True).distinct().order_by("site_id"):
        by_site[site_id] += due.filter(site_id=site_id).order_by(
            Case(When(slack_team_id="", then=Value(0)), default=Value(1)),
            "slack_checked_at",
            "pk",
        )[:RECHECKS_PER_SITE]
    return by_site


def check_slack_links() -> LinkCheck:
    """Ask Slack about the links due (module doc), site by site."""
    by_site = links_to_check(now=timezone.now())
    total = LinkCheck()
    for site in Site.objects.filter(pk__in=list(by_site)).order_by("pk"):
        total += check_site_slack_links(site=site, links=by_site[site.pk])
    return total


def check_site_slack_links(*, site: Site, links: list[Membership]) -> LinkCheck:
    """Confirm, clear or unconfirm ``site``'s ``links`` by what Slack says of them (module
    doc)."""
    token = slack.bot_token(site)
    if not token:
        return LinkCheck(unconfirmed=sum(1 for m in links if m.slack_checked_at is None))
    answers: dict[int, _Asked] = {}
    refused = ""
    for member in links:
        try:
            answer: SlackUser | SlackUserUnconfirmed = slack_user(
                token=token, slack_user_id=member.slack_user_id
            )
        except SlackUserUnconfirmed as unconfirmed:
            if unconfirmed.site_wide:
                refused = unconfirmed.token_refused
                break  # the others would be refused the same way; asked again next run
            answer = unconfirmed
        answers[member.pk] = (member.slack_user_id, member.slack_checked_at, answer)
    _record_token(site=site, refused=refused, answered=bool(answers))
    unanswered = sum(1 for m in links if m.slack_checked_at is None and m.pk not in answers)
    check = LinkCheck(unconfirmed=unanswered)
    if answers:
        check += _apply(site=site, answers=answers)
    logger.info(
        "site %s: Slack links confirmed %d, cleared %d, left unconfirmed %d, confirmed again "
        "%d, unconfirmed %d",
        site.pk, check.confirmed, check.cleared, check.unconfirmed, check.rechecked,
        check.revoked,
    )  # fmt: skip
    return check


def _record_token(*, site: Site, refused: str, answered: bool) -> None:
    """Record that Slack refused the site's bot token (``refused``: its error), or that it took
    it again (``answered``), on the site, for Settings → Slack and the clicks (module doc of
    :mod:`refunds.review.slack`). Only while the token is the one asked with: an owner may
    have set a new one meanwhile. The first refusal's time is kept."""
    same_token = Site.objects.filter(pk=site.pk, slack_bot_token_sealed=site.slack_bot_token_sealed)
    if refused:
        # Without its token Sill cannot re-check any link: the app was uninstalled, or its
        # token revoked or rotated. Said at WARNING on every run until an owner acts.
        logger.warning(
            "site %s: Slack refused the bot token (%s): no Slack link can be checked and Slack "
            "clicks decide nothing until an owner sets a new one",
            site.pk, refused,
        )  # fmt: skip
        _token_state(site, same_token.exclude(slack_token_refused=refused), refused=refused)
    elif answered and site.slack_token_refused:
        _token_state(site, same_token, refused="")


def _token_state(site: Site, rows: QuerySet[Site], *, refused: str) -> None:
    """Record the token ``refused`` (Slack's error) or taken again (""): every Slack click of
    the site decides nothing while it is refused, a change of who may decide, so the change
    is signed in the same transaction (Slack's error and the state before; never the token).
    Nothing when ``rows`` finds the site already so, or its token replaced meanwhile."""
    with transaction.atomic():
        locked = rows.select_for_update().first()
        if locked is None:
            return
        before = locked.slack_token_refused
        rows.update(
            slack_token_refused=refused, slack_token_refused_at=timezone.now() if refused else None
        )
        append_record(
            site=site,
            kind=AuditKind.SETTINGS_CHANGE,
            body={
                "change": "slack_token",
                "actor": None,  # Sill, by Slack's word
                "refused": refused,
                "refused_before": before,
            },
        )


def link_why(asked: str, reason: str) -> str:
    """Why the check took a link away, in words (Settings → Slack: "Not linked: …")."""
    words = {
        "not found": f"Slack has no user {asked} in the workspace any more",
        "deactivated": f"Slack says {asked} is deactivated",
        "guest": f"Slack says {asked} is a guest, not a full member of the workspace",
        "no email": f"Slack does not share {asked}'s email with the app (users:read.email)",
        "email not confirmed": f"Slack has not confirmed the email on {asked}'s profile",
    }
    return words.get(reason, f"Slack no longer vouches for {asked} ({reason})")[:200]


def _apply(*, site: Site, answers: dict[int, _Asked]) -> LinkCheck:
    """Confirm, clear or unconfirm the links Slack answered about, each only if it is still as
    it was asked (a save of Settings → Slack may have changed or confirmed it meanwhile)."""
    done: dict[str, int] = defaultdict(int)
    changes: list[dict[str, str | bool | None]] = []
    with transaction.atomic():
        # The lock Settings → Slack and member changes take first: links read next stay as
        # read until this commits.
        Site.objects.select_for_update(no_key=True).get(pk=site.pk)
        members = (
            Membership.objects.select_for_update(of=("self",))
            .filter(site=site, pk__in=list(answers))
            .select_related("user")
            .order_by("pk")
        )
        for member in members:
            asked, checked_at, answer = answers[member.pk]
            was_confirmed = checked_at is not None
            if member.slack_user_id != asked or member.slack_checked_at != checked_at:
                if not was_confirmed:
                    done["unconfirmed"] += 1
                continue
            who = member.user.get_username()
            if isinstance(answer, SlackUser) and is_members_email(
                slack_email=answer.email, member_email=member.user.email
            ):
                member.slack_checked_at = timezone.now()
                member.slack_team_id = answer.team_id
                member.slack_link_why = ""
                member.save(update_fields=["slack_checked_at", "slack_team_id", "slack_link_why"])
                if was_confirmed:
                    done["rechecked"] += 1
                else:
                    changes.append({"member": who, "slack_user_id": asked, "confirmed": True})
                    done["confirmed"] += 1
            elif isinstance(answer, SlackUser):
                # Confirmed or not: that Slack user is someone else now, and a link kept
                # unconfirmed would be confirmed again by nobody's word but the next save's.
                member.slack_user_id = member.slack_team_id = ""
                member.slack_checked_at = None
                member.slack_link_why = (
                    f"Slack's profile of {asked} has another email than the member's"
                )
                member.save(
                    update_fields=[
                        "slack_user_id", "slack_checked_at", "slack_team_id", "slack_link_why"
                    ]
                )  # fmt: skip
                changes.append(
                    {"member": who, "slack_user_id": None, "was": asked, "why": CLEARED_WHY}
                )
                done["cleared"] += 1
            elif was_confirmed and answer.reason:
                # Slack no longer vouches for the user (deactivated, a guest now, an email not
                # confirmed...): the link stays, to show in Settings → Slack as not confirmed,
                # and is confirmed again if Slack says so on a later run.
                member.slack_checked_at = None
                member.slack_team_id = ""
                member.slack_link_why = link_why(asked, answer.reason)
                member.save(update_fields=["slack_checked_at", "slack_team_id", "slack_link_why"])
                changes.append(
                    {
                        "member": who,
                        "slack_user_id": asked,
                        "confirmed": False,
                        "why": answer.reason,
                    }
                )
                done["revoked"] += 1
            elif not was_confirmed:
                # Never confirmed, and Slack says why not (a deactivated user, a guest...):
                # the page says so rather than "waiting" with no end. Not a change of who is
                # who, so no record.
                why = link_why(asked, answer.reason) if answer.reason else ""
                if why != member.slack_link_why:
                    member.slack_link_why = why
                    member.save(update_fields=["slack_link_why"])
                done["unconfirmed"] += 1
        if changes:
            append_record(
                site=site,
                kind=AuditKind.SETTINGS_CHANGE,
                body={
                    "change": "slack",
                    "actor": None,  # Sill, by Slack's word
                    "changed": [],
                    "slack_users": changes,
                },
            )
    return LinkCheck(**done)
