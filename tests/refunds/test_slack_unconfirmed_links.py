"""Slack links made before Sill asked Slack who a Slack user is decide nothing until Slack
confirms them.

Settings → Slack once saved any Slack member ID on the saver's word (an admin could link their
membership to a colleague's Slack user, whose clicks then approved as the admin). Such links
have no ``slack_checked_at``: a click from one is refused privately and changes nothing, the
beat task ``refunds.slack_check_links`` asks Slack (the loopback Web API of
``tests/refunds/slack_stub.py``, through slack_sdk) and confirms the member's own Slack user or
clears another's, and Settings → Slack says "Waiting for Slack to confirm" meanwhile.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest
from django_celery_beat.models import PeriodicTask

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.review.slack_link_checks import CLEARED_WHY
from refunds.tasks import slack_check_links_task
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import TOKEN, SlackStub
from tests.refunds.test_slack_approvals import HOOK, Slack, click, refused_privately

# Fixtures: the confirmed links and the click's response_url (a loopback Slack).
from tests.refunds.test_slack_approvals import linked as linked
from tests.refunds.test_slack_approvals import slack as slack

pytestmark = pytest.mark.django_db

NOT_CONFIRMED = "Your Slack user's link to Sill is not confirmed yet"


def _made_before(member: Membership, slack_user_id: str) -> None:
    """``member`` linked to ``slack_user_id`` as the code before the check saved it: on the
    saver's word, never confirmed (what accounts 0013 leaves every existing link)."""
    Membership.objects.filter(pk=member.pk).update(
        slack_user_id=slack_user_id, slack_checked_at=None, slack_team_id=""
    )


def _check() -> dict[str, int]:
    return slack_check_links_task.apply().get()


def _did(**counts: int) -> dict[str, int]:
    """What a run of the check says it did: ``counts``, and nothing else."""
    nothing = dict.fromkeys(("confirmed", "cleared", "unconfirmed", "rechecked", "revoked"), 0)
    return nothing | counts


# -- clicks from a link Slack has not confirmed ----------------------------------------------


@pytest.mark.parametrize("action", ["sill_approve", "sill_reject"])
def test_a_click_from_a_link_made_before_the_check_decides_nothing(
    site, linked, held: Refund, slack, action, django_capture_on_commit_callbacks
):
    """The old code's admin linked to a colleague's Slack user: the colleague's Approve
    approved the refund as the admin. Now it is refused, privately, and nothing is written."""
    _made_before(linked["admin"], "U0COLLEAGUE")
    before = list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        answer = click(site, held.id, user="U0COLLEAGUE", action=action, response_url=slack)
    assert answer.status_code == 200
    [refusal] = Slack.received
    assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
    assert NOT_CONFIRMED in refusal["text"] and "Settings → Slack" in refusal["text"]
    held.refresh_from_db()
    assert held.status == "held" and held.decided_by is None
    assert list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True)) == before


def test_an_owners_own_old_link_is_refused_too_and_before_the_role_is_said(
    site, linked, held: Refund, slack, django_capture_on_commit_callbacks
):
    """Until Slack confirms it, Sill does not know whose click it is: a reviewer's old link is
    told it is not confirmed, not what their role may do."""
    _made_before(linked["owner"], "U0OWNER")
    _made_before(linked["reviewer"], "U0REVIEW")
    for user in ("U0OWNER", "U0REVIEW"):
        Slack.received = []
        said = refused_privately(
            site, held.id, user=user, response_url=slack,
            capture=django_capture_on_commit_callbacks,
        )  # fmt: skip
        assert NOT_CONFIRMED in said
    held.refresh_from_db()
    assert held.status == "held"


# -- the check ------------------------------------------------------------------------------


def test_the_check_confirms_the_members_own_slack_user_and_its_click_then_decides(
    site, linked, held: Refund, slack, slack_api: SlackStub, django_capture_on_commit_callbacks
):
    _made_before(linked["owner"], "U0OWNER")
    _made_before(linked["admin"], "U0ADMIN")
    assert _check() == _did(confirmed=2)
    assert sorted(slack_api.calls) == [("users.info", "U0ADMIN"), ("users.info", "U0OWNER")]
    links = Membership.objects.filter(pk__in=[linked["owner"].pk, linked["admin"].pk])
    assert all(m.slack_checked_at is not None for m in links)
    record = AuditRecord.objects.filter(site=site, kind="settings_change").get()
    body = json.loads(record.payload)["body"]
    assert body["change"] == "slack" and body["actor"] is None
    assert body["slack_users"] == [
        {"member": "owner@roasters.example", "slack_user_id": "U0OWNER", "confirmed": True},
        {"member": "admin@roasters.example", "slack_user_id": "U0ADMIN", "confirmed": True},
    ]
    # Confirmed links are not asked again.
    slack_api.calls.clear()
    assert _check() == _did()
    assert slack_api.calls == []
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")
    assert held.decided_by == linked["owner"].user


def test_the_check_clears_a_link_to_someone_elses_slack_user(
    site, linked, held: Refund, slack, slack_api: SlackStub, django_capture_on_commit_callbacks
):
    """Slack says U0OTHER is admin2@: the admin had linked themselves to a colleague."""
    _made_before(linked["admin"], "U0OTHER")
    assert _check() == _did(cleared=1)
    admin = Membership.objects.get(pk=linked["admin"].pk)
    assert admin.slack_user_id == "" and admin.slack_checked_at is None
    record = AuditRecord.objects.filter(site=site, kind="settings_change").get()
    assert json.loads(record.payload)["body"]["slack_users"] == [
        {
            "member": "admin@roasters.example",
            "slack_user_id": None,
            "was": "U0OTHER",
            "why": CLEARED_WHY,
        }
    ]
    said = refused_privately(
        site, held.id, user="U0OTHER", response_url=slack,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    assert "not linked" in said
    held.refresh_from_db()
    assert held.status == "held"


def test_slack_down_leaves_links_unconfirmed_and_the_next_run_asks_again(
    site, linked, held: Refund, slack, slack_api: SlackStub, settings: Any,
    caplog: pytest.LogCaptureFixture, django_capture_on_commit_callbacks,
):  # fmt: skip
    _made_before(linked["owner"], "U0OWNER")
    _made_before(linked["admin"], "U0ADMIN")
    api = settings.SILL_SLACK_API_URL
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.SILL_SLACK_API_URL = f"http://127.0.0.1:{port}/api/"
    caplog.set_level(logging.DEBUG)
    assert _check() == _did(unconfirmed=2)
    old = Membership.objects.filter(pk__in=[linked["owner"].pk, linked["admin"].pk])
    assert [m.slack_checked_at for m in old] == [None, None]
    assert not AuditRecord.objects.filter(site=site, kind="settings_change").exists()
    said = refused_privately(
        site, held.id, user="U0OWNER", response_url=slack,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    assert NOT_CONFIRMED in said
    # A token Slack refuses: the first answer says so for the whole site, so nothing more is
    # asked; the links stay as they were.
    settings.SILL_SLACK_API_URL = api
    slack_api.token = "xoxb-9999999999-another-workspace"
    assert _check() == _did(unconfirmed=2)
    assert len(slack_api.calls) == 1
    assert slack_api.token not in caplog.text
    # Slack is back and the token is the site's again: the next run confirms both.
    slack_api.token = TOKEN
    assert _check() == _did(confirmed=2)
    held.refresh_from_db()
    assert held.status == "held"
    assert slack_api.token not in caplog.text


@pytest.mark.parametrize("email", ["unknown user", None])
def test_a_slack_user_slack_does_not_describe_stays_unconfirmed_not_cleared(
    site, members, slack_api: SlackStub, email
):
    """No such user (a token of another workspace answers so) or a profile without its email
    (the app lacks users:read.email) says nothing of whose it is: refused, asked again."""
    if email is None:
        slack_api.add_user("U0NOEMAIL", None)
    slack_user_id = "U0NOBODY" if email else "U0NOEMAIL"
    _made_before(members["admin"], slack_user_id)
    assert _check() == _did(unconfirmed=1)
    admin = Membership.objects.get(pk=members["admin"].pk)
    assert admin.slack_user_id == slack_user_id and admin.slack_checked_at is None


def test_an_old_link_to_a_guest_or_an_unconfirmed_email_stays_unconfirmed_and_decides_nothing(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The member's email on the profile is not enough: the check confirms neither a guest's
    Slack user nor an email Slack has not confirmed, so their clicks stay refused, privately,
    with nothing decided or written."""
    slack_api.add_user("U0OWNER", "owner@roasters.example", is_email_confirmed=False)
    slack_api.add_user("U0ADMIN", "admin@roasters.example", is_restricted=True)
    _made_before(linked["owner"], "U0OWNER")
    _made_before(linked["admin"], "U0ADMIN")
    assert _check() == _did(unconfirmed=2)
    before = list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True))
    for user in ("U0OWNER", "U0ADMIN"):
        with django_capture_on_commit_callbacks(execute=True):
            click(site, held.id, user=user, response_url=slack)
    assert [refusal["response_type"] for refusal in Slack.received] == ["ephemeral"] * 2
    assert all(NOT_CONFIRMED in refusal["text"] for refusal in Slack.received)
    held.refresh_from_db()
    assert held.status == "held" and held.decided_by is None
    assert list(AuditRecord.objects.filter(site=site).values_list("pk", flat=True)) == before


def test_a_site_without_a_bot_token_is_not_asked_and_other_sites_are_left_alone(
    site, other_site, members, slack_api: SlackStub
):
    _made_before(members["admin"], "U0ADMIN")
    _made_before(members["outsider"], "U0OWNER")  # other_site's owner; other_site has no token
    assert _check() == _did(confirmed=1)
    assert slack_api.calls == [("users.info", "U0ADMIN")]
    outsider = Membership.objects.get(pk=members["outsider"].pk)
    assert outsider.slack_user_id == "U0OWNER" and outsider.slack_checked_at is None
    assert not AuditRecord.objects.filter(site=other_site).exists()
    Site.objects.filter(pk=site.pk).update(slack_bot_token_sealed=b"")
    _made_before(members["owner"], "U0OWNER")
    slack_api.calls.clear()
    assert _check() == _did()
    assert slack_api.calls == []


def test_the_check_runs_from_beat() -> None:
    task = PeriodicTask.objects.get(task="refunds.slack_check_links")
    assert task.enabled and task.interval is not None
    assert (task.interval.every, task.interval.period) == (15, "minutes")


# -- Settings → Slack -----------------------------------------------------------------------


def test_a_link_made_on_the_settings_page_is_confirmed_at_once(
    client_for, site, members, slack_api: SlackStub
):
    answer = client_for("owner").post(
        "/settings/slack/", {"webhook_url": HOOK, f"slack_{members['admin'].pk}": "U0ADMIN"}
    )
    assert answer.status_code == 302
    admin = Membership.objects.get(pk=members["admin"].pk)
    assert admin.slack_user_id == "U0ADMIN" and admin.slack_checked_at is not None
    page = client_for("owner").get("/settings/slack/").content.decode()
    assert "Waiting for Slack to confirm" not in page
    # And unlinking forgets the confirmation with the link.
    client_for("owner").post("/settings/slack/", {f"slack_{members['admin'].pk}": ""})
    admin.refresh_from_db()
    assert admin.slack_user_id == "" and admin.slack_checked_at is None


def test_the_settings_page_says_an_old_link_is_not_confirmed_yet(client_for, site, members):
    _made_before(members["admin"], "U0ADMIN")
    box = f"slack-{members['admin'].pk}"
    page = client_for("admin").get("/settings/slack/").content.decode()
    assert page.count("Waiting for Slack to confirm") == 1
    assert f'id="{box}-state"' in page
    assert f'aria-describedby="{box}-state"' in page


def test_saving_the_page_with_an_old_link_unchanged_asks_slack_and_confirms_it(
    client_for, site, members, slack_api: SlackStub
):
    """An admin's save sends the old links back unchanged: Slack confirms the admin's own; the
    owner's, another person's Slack user, is left unconfirmed, not refused (the admin cannot
    change it; the check clears it)."""
    _made_before(members["admin"], "U0ADMIN")
    _made_before(members["owner"], "U0OTHER")  # Slack says admin2@, not owner@
    answer = client_for("admin").post(
        "/settings/slack/",
        {
            "webhook_url": HOOK,
            f"slack_{members['owner'].pk}": "U0OTHER",
            f"slack_{members['admin'].pk}": "U0ADMIN",
        },
    )
    assert answer.status_code == 302
    admin = Membership.objects.get(pk=members["admin"].pk)
    owner = Membership.objects.get(pk=members["owner"].pk)
    assert admin.slack_checked_at is not None
    assert owner.slack_user_id == "U0OTHER" and owner.slack_checked_at is None
    record = AuditRecord.objects.filter(site=site, kind="settings_change").get()
    body = json.loads(record.payload)["body"]
    assert body["changed"] == ["webhook set"]
    assert body["slack_users"] == [
        {"member": "admin@roasters.example", "slack_user_id": "U0ADMIN", "confirmed": True}
    ]
    assert sorted(slack_api.calls) == [("users.info", "U0ADMIN"), ("users.info", "U0OTHER")]
    page = client_for("admin").get("/settings/slack/").content.decode()
    assert page.count("Waiting for Slack to confirm") == 1
    assert f'aria-describedby="slack-{owner.pk}-state slack-owners-only"' in page
