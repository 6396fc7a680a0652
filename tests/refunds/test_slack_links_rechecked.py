"""A Slack link Slack confirmed is asked about again every day, and stops deciding when Slack
no longer vouches for the user.

Slack's word is given on a day: the Slack user may since have been deactivated, made a guest,
or given another email (an admin's profile edit, SCIM), and a click from them would still
decide as the member. The beat task ``refunds.slack_check_links`` asks ``users.info`` (the
loopback Web API of ``tests/refunds/slack_stub.py``) again about confirmed links a day old,
a bounded number of each site's a run; one Slack no longer vouches for is unconfirmed (another email: cleared)
in a signed ``settings_change`` record, and its clicks decide nothing.
"""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.review import slack_link_checks
from refunds.review.slack_link_checks import CLEARED_WHY
from refunds.tasks import slack_check_links_task
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import TEAM, SlackStub
from tests.refunds.test_slack_approvals import Slack, click

# Fixtures: the confirmed links (in the stub's workspace) and the click's response_url.
from tests.refunds.test_slack_approvals import linked as linked
from tests.refunds.test_slack_approvals import slack as slack

pytestmark = pytest.mark.django_db

NOT_CONFIRMED = "Your Slack user's link to Sill is not confirmed yet"


def _checked(member: Membership, *, days_ago: float) -> None:
    Membership.objects.filter(pk=member.pk).update(
        slack_checked_at=timezone.now() - timedelta(days=days_ago)
    )


def _check() -> dict[str, int]:
    return slack_check_links_task.apply().get()


def _changes(site: Site) -> list[dict[str, Any]]:
    records = AuditRecord.objects.filter(site=site, kind="settings_change").order_by("pk")
    return [change for r in records for change in json.loads(r.payload)["body"]["slack_users"]]


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"deleted": True}, "deactivated"),
        ({"is_restricted": True}, "guest"),
        ({"is_restricted": True, "is_ultra_restricted": True}, "guest"),
        ({"is_email_confirmed": False}, "email not confirmed"),
        (None, "not found"),
    ],
    ids=["deactivated", "multi-channel guest", "single-channel guest", "email unconfirmed", "gone"],
)
def test_a_link_slack_no_longer_vouches_for_is_unconfirmed_and_its_clicks_decide_nothing(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    flags: dict[str, bool] | None,
    why: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The old check asked only about unconfirmed links: the owner's Slack user, deactivated
    (or made a guest) after Slack confirmed it, still approved as the owner."""
    if flags is None:
        del slack_api.users["U0OWNER"]
    else:
        slack_api.add_user("U0OWNER", "owner@roasters.example", **flags)
    _checked(linked["owner"], days_ago=2)
    result = _check()
    owner = Membership.objects.get(pk=linked["owner"].pk)
    assert (owner.slack_user_id, owner.slack_checked_at, owner.slack_team_id) == (
        "U0OWNER", None, "",
    )  # fmt: skip
    assert (result["revoked"], result["rechecked"]) == (1, 0)
    assert slack_api.calls == [("users.info", "U0OWNER")]  # the others are a day from due
    assert _changes(site) == [
        {
            "member": "owner@roasters.example",
            "slack_user_id": "U0OWNER",
            "confirmed": False,
            "why": why,
        }
    ]
    before = list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    [refusal] = Slack.received
    assert refusal["response_type"] == "ephemeral" and NOT_CONFIRMED in refusal["text"]
    held.refresh_from_db()
    assert held.status == "held" and held.decided_by is None
    assert list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True)) == before


def test_a_confirmed_link_whose_slack_email_is_now_anothers_is_cleared(
    site: Site, linked: dict[str, Membership], slack_api: SlackStub
) -> None:
    slack_api.add_user("U0ADMIN", "someone.else@elsewhere.example")
    _checked(linked["admin"], days_ago=1.5)
    result = _check()
    admin = Membership.objects.get(pk=linked["admin"].pk)
    assert (admin.slack_user_id, admin.slack_checked_at, admin.slack_team_id) == ("", None, "")
    assert (result["cleared"], result["revoked"]) == (1, 0)
    assert _changes(site) == [
        {"member": "admin@roasters.example", "slack_user_id": None, "was": "U0ADMIN",
         "why": CLEARED_WHY},
    ]  # fmt: skip


def test_a_link_slack_still_vouches_for_is_stamped_again_without_an_audit_record(
    site: Site, linked: dict[str, Membership], slack_api: SlackStub
) -> None:
    _checked(linked["owner"], days_ago=3)
    result = _check()
    assert (result["rechecked"], result["revoked"]) == (1, 0)
    owner = Membership.objects.get(pk=linked["owner"].pk)
    assert owner.slack_checked_at is not None
    assert timezone.now() - owner.slack_checked_at < timedelta(minutes=1)
    assert owner.slack_team_id == TEAM
    assert not AuditRecord.objects.filter(site=site).exists()
    slack_api.calls.clear()
    assert _check()["rechecked"] == 0 and slack_api.calls == []  # a day before it is due


def test_a_run_asks_again_about_a_bounded_number_a_site_workspace_less_first_then_oldest(
    site: Site, linked: dict[str, Membership], slack_api: SlackStub, monkeypatch: Any
) -> None:
    monkeypatch.setattr(slack_link_checks, "RECHECKS_PER_SITE", 2)
    _checked(linked["owner"], days_ago=2)
    _checked(linked["admin"], days_ago=5)
    Membership.objects.filter(pk=linked["reviewer"].pk).update(slack_team_id="")
    assert _check()["rechecked"] == 2
    assert sorted(slack_api.calls) == [("users.info", "U0ADMIN"), ("users.info", "U0REVIEW")]
    slack_api.calls.clear()
    assert _check()["rechecked"] == 1
    assert slack_api.calls == [("users.info", "U0OWNER")]


def test_slack_unreachable_or_refusing_the_token_unconfirms_nothing(
    site: Site, linked: dict[str, Membership], slack_api: SlackStub, settings: Any
) -> None:
    """An outage, or a token Slack refuses, says nothing of the users: confirmed links stay
    confirmed (Slack approvals do not stop with Slack's API) and are asked again next run."""
    for member in linked.values():
        if member.slack_user_id:
            _checked(member, days_ago=2)
    api = settings.SILL_SLACK_API_URL
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.SILL_SLACK_API_URL = f"http://127.0.0.1:{port}/api/"
    assert _check()["revoked"] == 0
    settings.SILL_SLACK_API_URL = api
    slack_api.token = "xoxb-9999999999-another-workspace"
    assert _check()["revoked"] == 0 and len(slack_api.calls) == 1
    links = Membership.objects.filter(site=site).exclude(slack_user_id="")
    assert all(m.slack_checked_at is not None and m.slack_team_id == TEAM for m in links)
    # The only record is the token's refusal (clicks decide nothing while it lasts), nothing
    # about the users.
    [record] = AuditRecord.objects.filter(site=site)
    assert json.loads(record.payload)["body"]["change"] == "slack_token"
