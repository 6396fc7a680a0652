"""Settings → Slack says, in words beside each member's box, where their Slack link stands:
not linked; waiting for Slack to confirm (its clicks decide nothing); linked, confirmed by
Slack, with the workspace Sill recorded, or "workspace not recorded yet" for a link confirmed
before Sill recorded it (its clicks decide nothing until the check does)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from refunds.tasks import slack_check_links_task
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import TEAM, SlackStub

pytestmark = pytest.mark.django_db


def _state(page: str, member: Membership) -> str:
    """The words of ``member``'s link state on the page, tags dropped."""
    found = re.search(rf'id="slack-{member.pk}-state"[^>]*>(.*?)</div>', page, re.DOTALL)
    assert found, f"no link state for {member.user.email}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def test_the_page_says_each_members_link_state_in_words(
    client_for: Callable[[str], Client], site: Site, members: dict[str, Membership]
) -> None:
    confirmed = timezone.now() - timedelta(hours=2)
    Membership.objects.filter(pk=members["owner"].pk).update(
        slack_user_id="U0OWNER", slack_checked_at=confirmed, slack_team_id="T0ROASTERS"
    )
    Membership.objects.filter(pk=members["admin"].pk).update(
        slack_user_id="U0ADMIN", slack_checked_at=confirmed, slack_team_id=""
    )
    Membership.objects.filter(pk=members["staff"].pk).update(
        slack_user_id="U0STAFF", slack_checked_at=None, slack_team_id=""
    )
    page = client_for("owner").get("/settings/slack/").content.decode()

    owner = _state(page, members["owner"])
    assert owner.startswith("Linked (confirmed by Slack)")
    assert "workspace T0ROASTERS" in owner and "not recorded" not in owner
    admin = _state(page, members["admin"])
    assert admin.startswith("Linked (confirmed by Slack) Workspace not recorded yet")
    assert "decide nothing" in admin and "15 minutes" in admin
    staff = _state(page, members["staff"])
    assert staff.startswith("Waiting for Slack to confirm")
    assert "decide nothing" in staff
    assert _state(page, members["reviewer"]) == "Not linked"
    # Each state is tied to its box for a screen reader.
    for role in ("owner", "admin", "staff", "reviewer"):
        pk = members[role].pk
        box = re.search(rf'<input id="slack-{pk}"[^>]*>', page)
        assert box and f"slack-{pk}-state" in box.group(0)


def test_the_state_is_the_saved_links_not_what_was_typed_over_it(
    client_for: Callable[[str], Client], site: Site, members: dict[str, Membership]
) -> None:
    """A refused save gives back the box as typed: the saved link's state is not said beside
    another Slack user id (it would claim Slack confirmed what it never saw)."""
    Membership.objects.filter(pk=members["owner"].pk).update(
        slack_user_id="U0OWNER", slack_checked_at=timezone.now(), slack_team_id="T0ROASTERS"
    )
    answer = client_for("owner").post(
        "/settings/slack/", {f"slack_{members['owner'].pk}": "U0SOMEONE"}
    )
    assert answer.status_code == 422  # no bot token: Slack cannot confirm the new link
    assert f'id="slack-{members["owner"].pk}-state"' not in answer.content.decode()


def test_the_page_says_why_the_check_took_a_link_away(
    client_for: Callable[[str], Client],
    site: Site,
    members: dict[str, Membership],
    slack_api: SlackStub,
) -> None:
    """The check clears a link whose Slack email is now another's and unconfirms one Slack no
    longer vouches for; why was only in the audit record, and the page said "Not linked" or
    "Waiting for Slack to confirm" with no end in sight."""
    two_days_ago = timezone.now() - timedelta(days=2)
    for role, slack_id in (("owner", "U0OWNER"), ("admin", "U0ADMIN"), ("staff", "U0STAFF")):
        Membership.objects.filter(pk=members[role].pk).update(
            slack_user_id=slack_id,
            slack_checked_at=None if role == "staff" else two_days_ago,
            slack_team_id="" if role == "staff" else TEAM,
        )
    slack_api.add_user("U0OWNER", "owner@roasters.example", deleted=True)
    slack_api.add_user("U0ADMIN", "someone.else@roasters.example")
    slack_api.add_user("U0STAFF", "staff@roasters.example", is_restricted=True)
    slack_check_links_task.apply().get()

    page = client_for("owner").get("/settings/slack/").content.decode()
    owner = _state(page, members["owner"])
    assert owner.startswith("Not linked: Slack says U0OWNER is deactivated")
    assert "decide nothing" in owner
    admin = _state(page, members["admin"])
    assert admin == "Not linked: Slack's profile of U0ADMIN has another email than the member's"
    staff = _state(page, members["staff"])
    assert staff.startswith("Not linked: Slack says U0STAFF is a guest")

    # A link Slack confirms again says nothing of the old reason.
    slack_api.add_user("U0OWNER", "owner@roasters.example")
    slack_check_links_task.apply().get()
    page = client_for("owner").get("/settings/slack/").content.decode()
    assert _state(page, members["owner"]).startswith("Linked (confirmed by Slack)")
    # Nor does a new link an admin saves for themselves, confirmed by Slack.
    slack_api.add_user("U0ADMIN2", "admin@roasters.example")
    answer = client_for("admin").post(
        "/settings/slack/",
        {
            f"slack_{members['owner'].pk}": "U0OWNER",
            f"slack_{members['admin'].pk}": "U0ADMIN2",
            f"slack_{members['staff'].pk}": "U0STAFF",
        },
    )
    assert answer.status_code == 302
    page = client_for("owner").get("/settings/slack/").content.decode()
    assert _state(page, members["admin"]).startswith("Linked (confirmed by Slack)")
