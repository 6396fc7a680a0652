"""Slack refusing the site's bot token (the app uninstalled, its token revoked or rotated) is
recorded by the link check, said on Settings → Slack with what to do, and refuses every click
until an owner sets a token Slack takes.

It did nothing: the check stopped at the refusal and said nothing, links Slack could no longer
vouch for kept deciding, and the merchant never learnt the app had to be reinstalled."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.tasks import slack_check_links_task
from sill.accounts.models import Membership, Site
from tests.refunds.slack_stub import SlackStub
from tests.refunds.test_slack_approvals import Slack, click

# Fixtures: the confirmed links (in the stub's workspace) and the click's response_url.
from tests.refunds.test_slack_approvals import linked as linked
from tests.refunds.test_slack_approvals import slack as slack

pytestmark = pytest.mark.django_db

Capture = Callable[..., Any]


def _due(site: Site) -> None:
    """The site's links were last confirmed two days ago: the check asks again."""
    Membership.objects.filter(site=site).exclude(slack_user_id="").update(
        slack_checked_at=timezone.now() - timedelta(days=2)
    )


def _token_records(site: Site) -> list[dict[str, Any]]:
    """What the signed records about the site's bot token say, oldest first."""
    bodies = [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="settings_change").order_by("seq")
    ]
    return [
        {"refused": b["refused"], "refused_before": b["refused_before"]}
        for b in bodies
        if b.get("change") == "slack_token"
    ]


def _revoke(slack_api: SlackStub, error: str) -> None:
    """Slack no longer takes the token the site has (another is current, if any)."""
    slack_api.token, slack_api.token_error = "xoxb-3333333333-reinstalled-app-token", error


@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked", "account_inactive"])
def test_a_refused_token_is_recorded_said_on_the_page_and_refuses_clicks(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    client_for: Callable[[str], Client],
    error: str,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    old_token = SlackStub.token
    _due(site)
    _revoke(slack_api, error)
    with caplog.at_level(logging.INFO):
        slack_check_links_task.apply().get()
    site.refresh_from_db()
    assert site.slack_token_refused == error and site.slack_token_refused_at is not None
    [warned] = [r for r in caplog.records if r.levelname == "WARNING" and error in r.getMessage()]
    assert old_token not in warned.getMessage()
    # Switching every Slack click off is a change of who may decide: signed, once (a run that
    # finds it refused again writes nothing more), never naming the token.
    slack_check_links_task.apply().get()
    assert _token_records(site) == [{"refused": error, "refused_before": ""}]
    activity = client_for("owner").get("/activity/").content.decode()
    assert f"Slack refused the bot token ({error}): Slack clicks decide nothing" in activity
    assert not any(old_token in r.payload for r in AuditRecord.objects.filter(site=site))

    owner = client_for("owner").get("/settings/slack/").content.decode()
    assert "Slack refuses this site's bot token" in owner and f"<code>{error}</code>" in owner
    assert "Reinstall the app in Slack and paste its new bot token below" in owner
    admin = client_for("admin").get("/settings/slack/").content.decode()
    assert "ask an owner to set its new bot token here" in admin

    # Clicks keep being refused, privately, and decide nothing.
    for n in range(2):  # each its own click, as Slack signs each afresh
        with django_capture_on_commit_callbacks(execute=True):
            answer = click(site, held.id, user="U0OWNER", response_url=slack, trigger_id=f"t{n}")
            assert answer.status_code == 200
    assert [m["response_type"] for m in Slack.received] == ["ephemeral", "ephemeral"]
    assert all("Slack refuses this site's Slack app" in m["text"] for m in Slack.received)
    held.refresh_from_db()
    assert held.status == "held"


def test_an_owner_setting_a_new_token_ends_the_refusal(
    site: Site,
    linked: dict[str, Membership],
    held: Refund,
    slack: str,
    slack_api: SlackStub,
    client_for: Callable[[str], Client],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    _due(site)
    _revoke(slack_api, "token_revoked")
    slack_check_links_task.apply().get()
    form = {f"slack_{m.pk}": m.slack_user_id for m in linked.values()}  # as the page sends it
    answer = client_for("owner").post("/settings/slack/", {**form, "bot_token": slack_api.token})
    assert answer.status_code == 302
    site.refresh_from_db()
    assert site.slack_token_refused == "" and site.slack_token_refused_at is None
    page = client_for("owner").get("/settings/slack/").content.decode()
    assert "Slack refuses this site's bot token" not in page
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded"), Slack.received


def test_slack_taking_the_token_again_ends_the_refusal(
    site: Site, linked: dict[str, Membership], slack_api: SlackStub
) -> None:
    """account_inactive, say, for a workspace reactivated since: the next run's answer clears
    it. An outage in between says nothing of the token and leaves it recorded."""
    _due(site)
    token = slack_api.token
    _revoke(slack_api, "account_inactive")
    slack_check_links_task.apply().get()
    slack_api.token = token
    slack_check_links_task.apply().get()
    site.refresh_from_db()
    assert site.slack_token_refused == "" and site.slack_token_refused_at is None
    assert _token_records(site) == [
        {"refused": "account_inactive", "refused_before": ""},
        {"refused": "", "refused_before": "account_inactive"},
    ]
    assert all(
        m.slack_checked_at is not None
        for m in Membership.objects.filter(site=site).exclude(slack_user_id="")
    )
