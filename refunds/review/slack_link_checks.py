"""Confirming the Slack links Slack has not confirmed: those made before Settings → Slack asked
Slack who a Slack user is (:mod:`refunds.review.slack_setup`).

Until then an admin could link their membership to anyone's Slack user, and a click from that
user decides as the member; so a link with no ``Membership.slack_checked_at`` decides nothing
(:mod:`refunds.review.slack`) until this check, the beat task ``refunds.slack_check_links``,
asks Slack about it. For each site with a bot token, each such link is asked of ``users.info``
(:mod:`refunds.review.slack_users`) outside any lock (Slack may take seconds), then, under the
site's lock as Settings → Slack saves, a link still as it was asked is

- confirmed (``slack_checked_at``) when the email on the Slack profile is the member's;
- cleared when it is another email: the Slack user is someone else, whose clicks would
  decide as the member;
- left unconfirmed otherwise (no such user, a deactivated user, a guest, no email shared, an
  email Slack has not confirmed, the token refused, Slack unreachable or failing): its clicks
  stay refused, and the next run asks again.

Each site's confirmations and clearings are one signed ``settings_change`` record, in the
same shape as a save of Settings → Slack, written in the same transaction. The bot token is
never logged (slack_users logs Slack's error code only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from refunds.review import slack
from refunds.review.slack_users import SlackUserUnconfirmed, is_members_email, slack_user_email
from sill.accounts.models import Membership, Site

logger = logging.getLogger(__name__)

CLEARED_WHY = "Slack's profile of this Slack user has another email than the member's"


@dataclass(frozen=True)
class LinkCheck:
    """What one check did to a site's unconfirmed links."""

    confirmed: int = 0
    cleared: int = 0
    unconfirmed: int = 0  # left as they were, asked again next time

    def __add__(self, other: LinkCheck) -> LinkCheck:
        return LinkCheck(
            confirmed=self.confirmed + other.confirmed,
            cleared=self.cleared + other.cleared,
            unconfirmed=self.unconfirmed + other.unconfirmed,
        )


def unconfirmed_links(site: Site) -> list[Membership]:
    """``site``'s members linked to a Slack user Slack has not confirmed, oldest first."""
    return list(
        Membership.objects.filter(site=site, slack_checked_at__isnull=True)
        .exclude(slack_user_id="")
        .order_by("pk")
    )


def check_slack_links() -> LinkCheck:
    """Ask Slack about every unconfirmed link of every site with a bot token (module doc)."""
    site_ids = (
        Membership.objects.filter(slack_checked_at__isnull=True)
        .exclude(slack_user_id="")
        .exclude(site__slack_bot_token_sealed=b"")
        .values_list("site_id", flat=True)
        .distinct()
    )
    total = LinkCheck()
    for site in Site.objects.filter(pk__in=list(site_ids)).order_by("pk"):
        total += check_site_slack_links(site=site)
    return total


def check_site_slack_links(*, site: Site) -> LinkCheck:
    """Confirm or clear ``site``'s unconfirmed links by what Slack says of them (module doc)."""
    links = unconfirmed_links(site)
    token = slack.bot_token(site)
    if not links or not token:
        return LinkCheck(unconfirmed=len(links))
    emails: dict[int, tuple[str, str]] = {}  # membership id → (Slack user id asked, email)
    for member in links:
        try:
            email = slack_user_email(token=token, slack_user_id=member.slack_user_id)
        except SlackUserUnconfirmed as unconfirmed:
            if unconfirmed.site_wide:
                break  # the others would be refused the same way; asked again next run
            continue
        emails[member.pk] = (member.slack_user_id, email)
    done = _apply(site=site, emails=emails) if emails else LinkCheck()
    check = LinkCheck(
        confirmed=done.confirmed,
        cleared=done.cleared,
        unconfirmed=len(links) - done.confirmed - done.cleared,
    )
    logger.info(
        "site %s: Slack links confirmed %d, cleared %d, left unconfirmed %d",
        site.pk, check.confirmed, check.cleared, check.unconfirmed,
    )  # fmt: skip
    return check


def _apply(*, site: Site, emails: dict[int, tuple[str, str]]) -> LinkCheck:
    """Confirm or clear the links Slack answered about, each only if it is still as it was
    asked (a save of Settings → Slack may have changed or confirmed it meanwhile)."""
    confirmed = cleared = 0
    changes: list[dict[str, str | bool | None]] = []
    with transaction.atomic():
        # The lock Settings → Slack and member changes take first: links read next stay as
        # read until this commits.
        Site.objects.select_for_update(no_key=True).get(pk=site.pk)
        members = (
            Membership.objects.select_for_update(of=("self",))
            .filter(site=site, pk__in=list(emails))
            .select_related("user")
            .order_by("pk")
        )
        for member in members:
            asked, email = emails[member.pk]
            if member.slack_user_id != asked or member.slack_checked_at is not None:
                continue
            who = member.user.get_username()
            if is_members_email(slack_email=email, member_email=member.user.email):
                member.slack_checked_at = timezone.now()
                member.save(update_fields=["slack_checked_at"])
                changes.append({"member": who, "slack_user_id": asked, "confirmed": True})
                confirmed += 1
            else:
                member.slack_user_id = ""
                member.save(update_fields=["slack_user_id"])
                changes.append(
                    {"member": who, "slack_user_id": None, "was": asked, "why": CLEARED_WHY}
                )
                cleared += 1
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
    return LinkCheck(confirmed=confirmed, cleared=cleared)
