"""Who a Slack user is, as Slack says: ``users.info`` through slack_sdk's ``WebClient``, with the
site's bot token (its app needs the ``users:read`` and ``users:read.email`` scopes).

Settings → Slack links a Slack user to a member only when Slack confirms that user is the
member (:mod:`refunds.review.slack_setup`): the email on the Slack profile must be the
member's, and Slack must vouch for it: the user active, a full member of the workspace (not a
guest), the email confirmed by Slack (:func:`slack_user_email`). A click from a linked Slack
user decides as the member, so a link typed in by someone else (an admin linking themselves to
a colleague's Slack user) must not take effect on their word alone. Sill keeps nothing of
Slack's answer but the link, when Slack confirmed it (``Membership.slack_checked_at``) and the
workspace the user belongs to (``Membership.slack_team_id``: a click from another workspace
decides nothing); links made before Sill asked are confirmed or cleared later, and confirmed
ones asked again daily (:mod:`refunds.review.slack_link_checks`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5

NO_TOKEN = (
    "Slack can't confirm who this Slack user is without the app's bot token: an owner sets "
    "it above. Nothing was linked."
)
NO_EMAIL = (
    "Slack does not share this user's email with the app, so Sill can't confirm who they are: "
    "give the app the users:read.email scope, reinstall it, and save again."
)
UNREACHABLE = "Slack could not be reached to confirm who this Slack user is; nothing was linked."
# Slack's errors for a user id its workspace does not have (users.info documents
# user_not_found; users_not_found is the lookup methods' word for it).
_NOT_FOUND = frozenset({"user_not_found", "users_not_found", "user_not_visible"})
_BAD_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)


class SlackUserUnconfirmed(Exception):
    """Slack did not say who the Slack user is; ``str()`` is the words the page shows.

    ``site_wide``: the reason is not this user but the site's app (no token, a token Slack
    refuses, a missing scope) or Slack itself (unreachable, failing), so asking about the
    site's other Slack users now would be refused the same way. ``reason``: the same in a
    word when Slack said something of this user (no such user, deactivated, a guest, no email
    or an unconfirmed one), for the audit record of a link Slack no longer confirms; "" when
    Slack's answer says nothing of them (the next check asks again). ``token_refused``:
    Slack's error when it refused the bot token itself (``invalid_auth``, ``token_revoked``,
    ``account_inactive``...: the app must be reinstalled or its token set again)."""

    def __init__(
        self, message: str, *, site_wide: bool = False, reason: str = "", token_refused: str = ""
    ) -> None:
        super().__init__(message)
        self.site_wide = site_wide
        self.reason = reason
        self.token_refused = token_refused


@dataclass(frozen=True)
class SlackUser:
    """What Sill reads of a Slack user Slack vouches for: their profile's email and the
    workspace they belong to (``team_id``: T…, or an Enterprise Grid organisation's E… when
    the app is installed across the organisation)."""

    email: str
    team_id: str


def is_members_email(*, slack_email: str, member_email: str) -> bool:
    """Whether the email on a Slack profile is the member's: compared without case (Slack
    keeps what the person typed); a member without an email is no Slack user."""
    mine = (member_email or "").strip()
    return bool(mine) and slack_email.strip().casefold() == mine.casefold()


def slack_user(*, token: str, slack_user_id: str) -> SlackUser:
    """The email on ``slack_user_id``'s Slack profile and their workspace, from ``users.info``;
    :class:`SlackUserUnconfirmed` saying why not (no token, Slack unreachable, no such user,
    a token Slack refuses, a deactivated user, a guest, no email shared, an email Slack has
    not confirmed)."""
    if not token:
        raise SlackUserUnconfirmed(NO_TOKEN, site_wide=True)
    client = WebClient(token=token, base_url=settings.SILL_SLACK_API_URL, timeout=TIMEOUT_SECONDS)
    try:
        answer = client.users_info(user=slack_user_id)
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "")
        if error in _NOT_FOUND:
            raise SlackUserUnconfirmed(
                f"Slack has no user {slack_user_id} in this workspace.", reason="not found"
            ) from None
        if error in _BAD_TOKEN:
            raise SlackUserUnconfirmed(
                "Slack refused the app's bot token: an owner sets a current one above. "
                "Nothing was linked.",
                site_wide=True,
                token_refused=error,
            ) from None
        if error == "missing_scope":
            raise SlackUserUnconfirmed(NO_EMAIL, site_wide=True) from None
        logger.warning("Slack users.info failed: %s", error or exc.response.status_code)
        raise SlackUserUnconfirmed(UNREACHABLE, site_wide=True) from None
    except (SlackClientError, OSError, ValueError) as exc:
        # Refused connections and timeouts are OSErrors (urllib's URLError among them).
        logger.warning("Slack users.info failed: %s", type(exc).__name__)
        raise SlackUserUnconfirmed(UNREACHABLE, site_wide=True) from None
    user = answer.get("user")
    profile = user.get("profile") if isinstance(user, dict) else None
    email = profile.get("email") if isinstance(profile, dict) else None
    team_id = user.get("team_id") if isinstance(user, dict) else None
    if (
        not isinstance(user, dict)
        or user.get("id") != slack_user_id
        or not isinstance(team_id, str)
        or not team_id
    ):
        # Without its workspace a link could not tell this workspace's clicks from another's.
        raise SlackUserUnconfirmed(f"Slack did not confirm user {slack_user_id}; try again.")
    if user.get("deleted"):
        # Deactivated: its clicks cannot come now, and a link to it would speak for whoever
        # Slack reactivates it for.
        raise SlackUserUnconfirmed(
            f"Slack says {slack_user_id} is deactivated in this workspace. Nothing was linked.",
            reason="deactivated",
        )
    if user.get("is_restricted") or user.get("is_ultra_restricted"):
        # A guest (multi- or single-channel) comes from outside the workspace's organisation:
        # members may invite one, and the workspace's sign-in rules (SSO, its offboarding) can
        # exempt guests. Who decides refunds is linked only to a full member's Slack user.
        raise SlackUserUnconfirmed(
            f"{slack_user_id} is a guest in this Slack workspace: a member is linked only to a "
            "full member's Slack user. Nothing was linked.",
            reason="guest",
        )
    if not isinstance(email, str) or not email.strip():
        raise SlackUserUnconfirmed(NO_EMAIL, reason="no email")
    if user.get("is_email_confirmed") is not True:
        # Until the address answers Slack's confirmation mail the profile email is only what
        # was typed (by the person, an admin or SCIM): the very word this check must not take.
        # Slack leaving the flag out is no confirmation either.
        raise SlackUserUnconfirmed(
            f"Slack has not confirmed the email on {slack_user_id}'s profile, so it may not be "
            "theirs: they confirm it in Slack, then save again. Nothing was linked.",
            reason="email not confirmed",
        )
    return SlackUser(email=email.strip(), team_id=team_id)
