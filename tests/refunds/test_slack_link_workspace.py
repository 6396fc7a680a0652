"""A Slack link belongs to one Slack workspace, and only clicks from it decide.

The signing secret is the app's, not the workspace's: an app installed in another workspace
(or its organisation) signs that workspace's clicks too, and a Slack user id names someone in
one workspace only. Sill records the workspace ``users.info`` says the user is of when Slack
confirms the link (``Membership.slack_team_id``) and refuses a click that names another,
privately, deciding nothing. On Enterprise Grid a click names its workspace (``team.id``), the
organisation (``team.enterprise_id``, ``enterprise.id``) and ``user.team_id`` (the
organisation's E… id): a link of either matches. The Slack Web API is the loopback stub of
``tests/refunds/slack_stub.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.review.slack import OTHER_WORKSPACE, UNRECORDED_WORKSPACE
from refunds.tasks import slack_check_links_task, slack_decide_task
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import TEAM, SlackStub
from tests.refunds.test_slack_approvals import Slack, click

# Fixtures: the confirmed links (in the stub's workspace) and the click's response_url.
from tests.refunds.test_slack_approvals import linked as linked
from tests.refunds.test_slack_approvals import slack as slack

pytestmark = pytest.mark.django_db


def _records(site: Site) -> list[int]:
    return list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True))


def _told_privately(capture: Any, site: Site, refund: Refund, **clicked: Any) -> str:
    Slack.received = []
    with capture(execute=True):
        assert click(site, refund.id, **clicked).status_code == 200
    [refusal] = Slack.received
    assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
    return refusal["text"]


def test_a_link_records_the_workspace_slack_says_the_user_is_of(
    client_for: Callable[[str], Client],
    site: Site,
    members: dict[str, Membership],
    slack_api: SlackStub,
) -> None:
    slack_api.add_user("U0GRIDADMIN", "admin@roasters.example", team_id="E0ORG")
    page = {f"slack_{members['owner'].pk}": "U0OWNER"}
    page[f"slack_{members['admin'].pk}"] = "U0GRIDADMIN"
    assert client_for("owner").post("/settings/slack/", page).status_code == 302
    owner = Membership.objects.get(pk=members["owner"].pk)
    admin = Membership.objects.get(pk=members["admin"].pk)
    assert (owner.slack_team_id, admin.slack_team_id) == (TEAM, "E0ORG")
    # Unlinking forgets it with the link.
    client_for("owner").post("/settings/slack/", {f"slack_{members['admin'].pk}": ""})
    admin.refresh_from_db()
    assert (admin.slack_user_id, admin.slack_checked_at, admin.slack_team_id) == ("", None, "")


@pytest.mark.parametrize("action", ["sill_approve", "sill_reject"])
@pytest.mark.parametrize(
    "elsewhere",
    [
        {"workspace": "T0ELSEWHERE"},
        {"workspace": "T0ELSEWHERE", "enterprise": {"id": "E0OTHERORG", "name": "Other"}},
    ],
    ids=["another workspace", "another organisation"],
)
def test_a_click_from_another_workspace_decides_nothing(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    action: str,
    elsewhere: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The old code took a click signed with the app's secret from any workspace: the owner's
    Slack user id, clicked in a workspace the app is also installed in, approved as the
    owner. Now the clicker is told why, privately, and nothing is decided or written."""
    before = _records(site)
    said = _told_privately(
        django_capture_on_commit_callbacks, site, held, user="U0OWNER", action=action,
        response_url=slack, **elsewhere,
    )  # fmt: skip
    assert said == OTHER_WORKSPACE
    held.refresh_from_db()
    assert held.status == "held" and held.decided_by is None
    assert _records(site) == before


@pytest.mark.parametrize(
    ("recorded", "clicked"),
    [
        # The app installed across the organisation: users.info says the organisation's id;
        # the click names the workspace it was clicked in, and the organisation.
        (
            "E0ORG",
            {
                "workspace": "T0WORKSPACE",
                "user_team": "E0ORG",
                "enterprise": {"id": "E0ORG", "name": "Roasters Group"},
            },
        ),
        # The same as Slack may send it to an org-wide app: ``team`` null.
        (
            "E0ORG",
            {
                "team": None,
                "user_team": "E0ORG",
                "enterprise": {"id": "E0ORG", "name": "Roasters Group"},
            },
        ),
        # A workspace's team naming its organisation.
        ("E0ORG", {"team": {"id": "T0WORKSPACE", "enterprise_id": "E0ORG"}}),
        # The app installed in one workspace of the organisation: users.info says the
        # workspace; the click's user.team_id is the organisation's.
        (
            "T0WORKSPACE",
            {
                "workspace": "T0WORKSPACE",
                "user_team": "E0ORG",
            },
        ),
    ],
    ids=["org-wide install", "org-wide, team null", "team.enterprise_id", "workspace install"],
)
def test_an_enterprise_grid_click_decides_when_its_workspace_or_organisation_is_the_links(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    recorded: str,
    clicked: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    Membership.objects.filter(pk=linked["owner"].pk).update(slack_team_id=recorded)
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack, **clicked)
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")
    assert held.decided_by == linked["owner"].user


def test_a_link_confirmed_before_sill_recorded_its_workspace_decides_once_the_check_has(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Links Slack confirmed before accounts 0015 have no workspace: their clicks are refused
    (Sill cannot tell this workspace's from another's) until the check's next run asks Slack
    and records it. Recording it changes no one's link and writes no audit record."""
    Membership.objects.filter(site=site).exclude(slack_user_id="").update(slack_team_id="")
    before = _records(site)
    said = _told_privately(
        django_capture_on_commit_callbacks, site, held, user="U0OWNER", response_url=slack
    )
    assert said == UNRECORDED_WORKSPACE
    held.refresh_from_db()
    assert held.status == "held" and _records(site) == before
    result = slack_check_links_task.apply().get()
    assert result["rechecked"] == 3 and result["revoked"] == 0
    assert set(Membership.objects.filter(site=site).exclude(slack_user_id="").values_list(
        "slack_team_id", flat=True
    )) == {TEAM}  # fmt: skip
    assert _records(site) == before
    Slack.received = []
    with django_capture_on_commit_callbacks(execute=True):
        # Another click (Slack gives each its own trigger_id), so never taken for a replay of
        # the first: an "age" alone made the same signature when a second had passed.
        click(site, held.id, user="U0OWNER", response_url=slack, trigger_id="second.click")
    held.refresh_from_db()
    assert held.decided_by == linked["owner"].user


@pytest.mark.parametrize("workspace", [TEAM, "T0ELSEWHERE"], ids=["its workspace", "another"])
def test_a_click_on_a_link_whose_workspace_is_not_recorded_yet_is_told_to_try_again_soon(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    workspace: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Until the check records the link's workspace Sill cannot tell where the click came
    from, so it must not say "another workspace" (untrue for most such clicks, and alarming)
    nor send the clicker away for good: Sill is still confirming the link, and a click in a
    few minutes decides. Told privately; the message and its buttons stay as they were."""
    Membership.objects.filter(pk=linked["owner"].pk).update(slack_team_id="")
    said = _told_privately(
        django_capture_on_commit_callbacks, site, held, user="U0OWNER", response_url=slack,
        workspace=workspace,
    )  # fmt: skip
    assert "still confirming your link with Slack" in said
    assert "try again in a few minutes" in said
    assert "another" not in said and "workspace" not in said
    held.refresh_from_db()
    assert held.status == "held" and held.decided_by is None


def test_a_click_queued_without_its_workspace_is_not_said_to_come_from_another(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """A click queued before Sill read the click's workspace (in the queue across the deploy)
    names none: Sill cannot tell where it came from, so it decides nothing, and says so
    rather than that it came from another workspace; a new click names it."""
    Slack.received = []
    with django_capture_on_commit_callbacks(execute=True):
        args = (site.pk, "sill_approve", held.id, "U0OWNER", slack)  # no teams: queued before
        assert slack_decide_task.apply(args).get() == "refused"
    [refusal] = Slack.received
    assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
    assert "another" not in refusal["text"]
    assert "could not tell which Slack workspace" in refusal["text"]
    assert "click again" in refusal["text"]
    held.refresh_from_db()
    assert held.status == "held"


def test_a_link_in_another_workspace_is_not_matched_by_a_fresh_check(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The check records what Slack says, not what the click says: a user Slack now places in
    another workspace is recorded there, and this workspace's clicks by that id decide
    nothing."""
    Membership.objects.filter(pk=linked["owner"].pk).update(
        slack_team_id="", slack_checked_at=timezone.now()
    )
    slack_api.add_user("U0OWNER", "owner@roasters.example", team_id="T0ELSEWHERE")
    slack_check_links_task.apply().get()
    assert Membership.objects.get(pk=linked["owner"].pk).slack_team_id == "T0ELSEWHERE"
    said = _told_privately(
        django_capture_on_commit_callbacks, site, held, user="U0OWNER", response_url=slack
    )
    assert said == OTHER_WORKSPACE
    held.refresh_from_db()
    assert held.status == "held"
