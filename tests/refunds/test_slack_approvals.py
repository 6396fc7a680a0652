"""Approve and Reject from Slack: clicks signed as Slack signs them, sent to Sill's
interactivity endpoint; the Slack user mapped to a member who may decide; the browser's
re-checks, maker-checker, expiry and two-factor policy; the message replaced through the
click's response_url (a loopback stand-in for Slack, driven through slack_sdk)."""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditKind, AuditRecord
from refunds.models import Refund
from refunds.review.slack import seal_signing_secret, webhook_url
from sill.accounts.models import Membership
from tests.audit.test_activity_rows import BY as ACTIVITY_BY
from tests.audit.test_activity_rows import _cell as activity_cell
from tests.audit.test_activity_rows import _rows as activity_rows
from tests.rails.loopback import start_serving
from tests.refunds.conftest import hold_refund, open_dispute
from tests.refunds.slack_stub import TEAM

pytestmark = pytest.mark.django_db

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


class Slack(BaseHTTPRequestHandler):
    """What Slack's response_url receives."""

    received: list[dict] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        Slack.received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slack(settings) -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Slack)
    Slack.received = []
    start_serving(server)
    settings.SILL_SLACK_RESPONSE_HOSTS = ("127.0.0.1",)
    yield f"http://127.0.0.1:{server.server_port}/actions/T1/123/abc"
    server.shutdown()
    server.server_close()


@pytest.fixture
def linked(site, members):
    """Owner, admin and reviewer linked to their Slack users, as Slack confirmed them, in the
    stub's workspace."""
    site.slack_signing_secret = seal_signing_secret(site, SECRET)
    site.save()
    for role, slack_id in (("owner", "U0OWNER"), ("admin", "U0ADMIN"), ("reviewer", "U0REVIEW")):
        members[role].slack_user_id = slack_id
        members[role].slack_checked_at = timezone.now()
        members[role].slack_team_id = TEAM
        members[role].save()
    return members


@pytest.fixture
def held(original, agent) -> Refund:
    return hold_refund(order=original, agent=agent)


def click(
    site, refund_id: str, *, user: str, action: str = "sill_approve", response_url: str,
    secret: str = SECRET, age: int = 0, workspace: str = TEAM, user_team: str | None = None,
    **grid: Any,
):  # fmt: skip
    """A click signed as Slack signs it, from ``workspace`` (``team.id``; ``user.team_id`` too
    unless ``user_team``: an Enterprise Grid organisation's id); ``grid`` adds or replaces
    payload keys: Enterprise Grid's ``enterprise``, a ``team`` naming its organisation or
    null."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "team_id": user_team or workspace},
        "team": {"id": workspace, "domain": "roasters"},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action,
                "block_id": f"sill_decide:{refund_id}",
                "value": refund_id,
                "type": "button",
            }
        ],
    } | grid
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time()) - age)
    base = b"v0:" + timestamp.encode() + b":" + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return Client().post(
        f"/slack/interactions/{site.pk}",
        data=body,
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp,
        HTTP_X_SLACK_SIGNATURE=signature,
    )


def test_an_owner_approves_in_slack_and_the_message_says_so(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        answer = click(site, held.id, user="U0OWNER", response_url=slack)
    assert answer.status_code == 200
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")
    assert held.decided_by == linked["owner"].user
    review = AuditRecord.objects.filter(site=site, kind="escalated_approved").get()
    body = json.loads(review.payload)["body"]
    assert body["reviewer"] == "owner@roasters.example" and body["note"] == "Decided in Slack"
    # Where it was decided is the record's own field, not its note (which a person types).
    assert body["via"] == "slack" and held.decided_via == "slack"
    [update] = Slack.received
    assert update["replace_original"] is True
    assert "approved" in update["text"] and "owner@roasters.example" in update["text"]


def test_a_click_is_acknowledged_before_the_decision_runs(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """Slack waits 3 s for the answer to a click, and an approval first reads the charge at
    the rail (up to SILL_RAIL_FACT_TIMEOUT_SECONDS): the request only verifies and queues the
    click; a worker decides and replaces the message through the response_url."""
    with django_capture_on_commit_callbacks(execute=True):
        answer = click(site, held.id, user="U0OWNER", response_url=slack)
        assert answer.status_code == 200 and answer.content == b""
        held.refresh_from_db()
        assert held.status == "held" and Slack.received == []  # nothing decided yet
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")
    [update] = Slack.received
    assert update["replace_original"] is True and "approved" in update["text"]


def test_reject_in_slack(site, linked, held, slack, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0ADMIN", action="sill_reject", response_url=slack)
    held.refresh_from_db()
    assert held.status == "rejected" and held.outcome_code == "rejected_by_reviewer"
    assert "rejected" in Slack.received[0]["text"]


@pytest.mark.parametrize(
    "forgery", [{"secret": "not-the-secret"}, {"age": 600}], ids=["forged", "stale"]
)
def test_a_forged_or_stale_click_is_refused_and_changes_nothing(site, linked, held, slack, forgery):
    answer = click(site, held.id, user="U0OWNER", response_url=slack, **forgery)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "bad_signature"
    held.refresh_from_db()
    assert held.status == "held" and Slack.received == []


def refused_privately(site, refund_id: str, *, user: str, response_url: str, capture) -> str:
    """Click, and return the refusal Slack was asked to show the clicker alone."""
    with capture(execute=True):
        answer = click(site, refund_id, user=user, response_url=response_url)
    assert answer.status_code == 200
    [refusal] = Slack.received
    assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
    return refusal["text"]


@pytest.mark.parametrize(
    ("user", "told"),
    [("U0REVIEW", "Only owners and admins"), ("U0STRANGER", "not linked")],
    ids=["reviewer", "unlinked"],
)
def test_a_slack_user_who_may_not_decide_is_told_privately(
    site, linked, held, slack, user, told, django_capture_on_commit_callbacks
):
    said = refused_privately(
        site, held.id, user=user, response_url=slack, capture=django_capture_on_commit_callbacks
    )
    assert told in said
    held.refresh_from_db()
    assert held.status == "held"


def test_a_site_that_requires_two_factors_decides_in_sill_only(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    site.require_two_factor = True
    site.save()
    said = refused_privately(
        site, held.id, user="U0OWNER", response_url=slack,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    assert "second factor" in said
    held.refresh_from_db()
    assert held.status == "held"


def test_maker_checker_holds_in_slack(
    site, linked, order, slack, django_capture_on_commit_callbacks
):
    mine = hold_refund(order=order, requested_by=linked["owner"].user, reason_label="")
    said = refused_privately(
        site, mine.id, user="U0OWNER", response_url=slack,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    # Told to the clicker alone: the message keeps its buttons for another owner or admin.
    assert "another owner or admin" in said
    mine.refresh_from_db()
    assert mine.status == "held"


def test_an_expired_hold_is_not_approved_from_slack(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    Refund.objects.filter(pk=held.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    held.refresh_from_db()
    assert held.status == "expired" and held.outcome_code == "expired"
    update, refusal = Slack.received  # the message says so too, and nothing was refunded
    assert "expired: nothing was refunded" in update["text"] and update["replace_original"]
    assert refusal["response_type"] == "ephemeral" and "expired" in refusal["text"].lower()


def test_a_late_click_shows_who_decided_not_an_error(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """Decided in Sill (or by another click) while the message still had its buttons: a
    click then updates the message to where the refund stands, and tells the clicker why
    nothing more happened."""
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0ADMIN", action="sill_reject", response_url=slack)
        click(site, held.id, user="U0OWNER", response_url=slack)
    first, update, refusal = Slack.received
    assert "rejected" in first["text"] and "admin@roasters.example" in first["text"]
    assert update["replace_original"] is True
    assert "rejected" in update["text"] and "admin@roasters.example" in update["text"]
    assert refusal["response_type"] == "ephemeral"
    held.refresh_from_db()
    assert held.status == "rejected"


def test_another_sites_refund_is_not_found(
    site, other_site, linked, slack, make_order, agent, django_capture_on_commit_callbacks
):
    other_site.slack_signing_secret = seal_signing_secret(other_site, SECRET)
    other_site.save()
    held = hold_refund(order=make_order(), agent=agent)
    said = refused_privately(
        other_site, held.id, user="U0OWNER", response_url=slack,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    assert "not linked" in said or "not on this site" in said
    held.refresh_from_db()
    assert held.status == "held"


def test_sill_posts_the_outcome_only_to_slack(
    site, linked, held, settings, django_capture_on_commit_callbacks
):
    settings.SILL_SLACK_RESPONSE_HOSTS = ("hooks.slack.com",)
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url="http://169.254.169.254/latest")
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")  # decided; the odd URL just not called


def test_a_site_without_slack_set_up_has_no_endpoint(site, members, held):
    answer = click(site, held.id, user="U0OWNER", response_url="https://hooks.slack.com/x")
    assert answer.status_code == 404


def _duplicated_actions(refund_id: str) -> bytes:
    """A click whose JSON names "actions" twice: Reject, then Approve."""
    click = json.dumps(
        {"type": "block_actions", "user": {"id": "U0OWNER"}, "response_url": "https://x/"}
    )
    twice = ", ".join(
        f'"actions": [{{"action_id": "{action}", "value": "{refund_id}"}}]'
        for action in ("sill_reject", "sill_approve")
    )
    return urlencode({"payload": click[:-1] + ", " + twice + "}"}).encode()


@pytest.mark.parametrize(
    "body",
    [
        lambda refund_id: b"payload=%7Bnot-json",
        # Nested past any recursion limit (Slack's clicks nest a few levels).
        lambda refund_id: b"payload=" + b"[" * 60_000,
        _duplicated_actions,
    ],
    ids=["not-json", "deep", "duplicate-key"],
)
def test_a_malformed_click_is_refused(site, linked, held, body, django_capture_on_commit_callbacks):
    """The payload is JSON read as every JSON body is (sill.jsonbody): a signed body that is
    not JSON, nests too deep or names a key twice (which a lenient reader resolves to the last
    one) is 400 malformed, never a 500, and nothing is decided."""
    body = body(held.id)
    timestamp = str(int(time.time()))
    signature = (
        "v0="
        + hmac.new(
            SECRET.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256
        ).hexdigest()
    )
    with django_capture_on_commit_callbacks(execute=True) as queued:
        answer = Client(raise_request_exception=False).post(
            f"/slack/interactions/{site.pk}", data=body,
            content_type="application/x-www-form-urlencoded",
            HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE=signature,
        )  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "malformed"
    assert queued == []
    held.refresh_from_db()
    assert held.status == "held"


def test_a_click_on_review_in_sill_is_acknowledged_and_decides_nothing(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """The "Review in Sill" link button: Slack opens the refund's page in the browser and
    also sends the click here, expecting a 200 (anything else puts a warning sign beside the
    button, each time anyone uses it). The click carries no value and asks nothing of Sill."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U0OWNER", "username": "someone", "team_id": TEAM},
        "team": {"id": TEAM},
        "response_url": slack,
        "actions": [
            {
                "action_id": "sill_open",
                "block_id": f"sill_decide:{held.id}",
                "type": "button",
                "action_ts": "1700000000.000100",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time()))
    base = b"v0:" + timestamp.encode() + b":" + body
    with django_capture_on_commit_callbacks(execute=True) as queued:
        answer = Client().post(
            f"/slack/interactions/{site.pk}", data=body,
            content_type="application/x-www-form-urlencoded",
            HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp,
            HTTP_X_SLACK_SIGNATURE="v0="
            + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest(),
        )  # fmt: skip
    assert answer.status_code == 200 and answer.content == b""
    assert queued == []  # nothing to decide, nothing to say in Slack
    held.refresh_from_db()
    assert held.status == "held" and Slack.received == []


# -- Settings → Slack ------------------------------------------------------------------------

HOOK = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX"


def test_an_owner_sets_up_slack_and_links_members(client_for, site, members, slack_api):
    owner = client_for("owner")
    page = owner.get("/settings/slack/")
    assert page.status_code == 200 and f"/slack/interactions/{site.pk}" in page.content.decode()
    answer = owner.post(
        "/settings/slack/",
        {
            "webhook_url": HOOK,
            "signing_secret": SECRET.replace("yyyzzz", "abcdef"),
            f"slack_{members['admin'].pk}": "u0admin",
        },
    )
    assert answer.status_code == 302
    site.refresh_from_db()
    members["admin"].refresh_from_db()
    assert webhook_url(site) == HOOK and site.slack_signing_secret
    # Sealed at rest: the URL is a credential, never a plain column.
    assert HOOK.encode() not in bytes(site.slack_webhook_sealed)
    assert members["admin"].slack_user_id == "U0ADMIN"
    record = AuditRecord.objects.filter(site=site, kind="settings_change").get()
    assert HOOK not in record.payload and "abcdef" not in record.payload  # secrets stay out
    page = owner.get("/settings/slack/").content.decode()
    assert "abcdef" not in page and HOOK not in page  # write-only


@pytest.mark.parametrize(
    "bad",
    [
        {"webhook_url": "https://evil.example/services/T000/B000/XXXX"},
        {"signing_secret": "not-hex"},
        {"slack_ADMIN": "not an id"},
        {"slack_ADMIN": "U0SAME", "slack_OWNER": "U0SAME"},
    ],
)
def test_bad_settings_change_nothing(client_for, site, members, bad):
    body = {
        key.replace("ADMIN", str(members["admin"].pk)).replace("OWNER", str(members["owner"].pk)): v
        for key, v in bad.items()
    }
    answer = client_for("owner").post("/settings/slack/", body)
    assert answer.status_code == 422
    site.refresh_from_db()
    assert not site.slack_webhook_sealed and not site.slack_signing_secret
    assert not AuditRecord.objects.filter(site=site, kind="settings_change").exists()


@pytest.mark.parametrize(
    "change",
    [
        {"signing_secret": SECRET.replace("yyyzzz", "abcdef")},
        {"slack_OWNER": "U0ADMINSELF"},
    ],
)
def test_an_admin_cannot_speak_for_another_decider_in_slack(client_for, site, members, change):
    """An admin could link an owner to the admin's own Slack user (then approve from Slack as
    that owner: past "whoever asked cannot approve"), or set the signing secret (then forge
    any linked member's click). Both are the owners' to change; a refusal changes nothing."""
    body = {k.replace("OWNER", str(members["owner"].pk)): v for k, v in change.items()}
    body[f"slack_{members['admin'].pk}"] = ""
    answer = client_for("admin").post("/settings/slack/", body)
    assert answer.status_code == 422
    assert "Only an owner" in answer.content.decode()
    site.refresh_from_db()
    members["owner"].refresh_from_db()
    assert not site.slack_signing_secret and members["owner"].slack_user_id == ""
    assert not AuditRecord.objects.filter(site=site, kind="settings_change").exists()


def test_an_admin_links_their_own_and_non_deciders_slack_users(
    client_for, site, members, slack_api
):
    Membership.objects.filter(pk=members["owner"].pk).update(slack_user_id="U0OWNER")
    answer = client_for("admin").post(
        "/settings/slack/",
        {
            "webhook_url": HOOK,
            f"slack_{members['owner'].pk}": "U0OWNER",  # unchanged, as the form sends it
            f"slack_{members['admin'].pk}": "U0ADMIN",
            f"slack_{members['reviewer'].pk}": "U0REVIEW",
        },
    )
    assert answer.status_code == 302
    links = dict(Membership.objects.filter(site=site).values_list("role", "slack_user_id"))
    assert links["owner"] == "U0OWNER" and links["admin"] == "U0ADMIN"
    assert links["reviewer"] == "U0REVIEW"


def test_an_admin_linking_themselves_to_a_colleagues_slack_user_is_told_why_not(
    client_for, site, members, slack_api
):
    """Slack says U0COLLEAGUE is someone else: their clicks would approve as the admin."""
    slack_api.add_user("U0COLLEAGUE", "colleague@roasters.example")
    answer = client_for("admin").post(
        "/settings/slack/", {"webhook_url": HOOK, f"slack_{members['admin'].pk}": "U0COLLEAGUE"}
    )
    assert answer.status_code == 422
    page = answer.content.decode()
    assert "a member is linked only to their own Slack user" in page
    assert 'value="U0COLLEAGUE"' in page and 'aria-invalid="true"' in page
    members["admin"].refresh_from_db()
    site.refresh_from_db()
    assert members["admin"].slack_user_id == "" and not site.slack_webhook_sealed
    assert not AuditRecord.objects.filter(site=site, kind="settings_change").exists()


def test_a_refused_link_is_said_beside_its_box_and_only_there(client_for, members, slack_api):
    """It was said in a list above the form, away from the box it was about (a phone scrolls
    past a screen of fields between them), with nothing beside the box but a red border."""
    box = f"slack-{members['admin'].pk}"
    answer = client_for("owner").post(
        "/settings/slack/", {f"slack_{members['admin'].pk}": "U0NOBODY"}
    )

    assert answer.status_code == 422
    page = answer.content.decode()
    assert f'aria-describedby="{box}-error"' in page
    assert (
        f'<small class="field-error" id="{box}-error">'
        "Slack has no user U0NOBODY in this workspace.</small>"
    ) in page
    assert page.count("Slack has no user U0NOBODY") == 1  # not again above the form
    assert "<strong>Nothing was saved.</strong> Fix what is marked below" in page


def test_a_refusal_no_box_stands_for_is_said_above_the_form(client_for, members, slack_api):
    """One Slack user for two members: the refusal is the save's, not one box's."""
    answer = client_for("owner").post(
        "/settings/slack/",
        {f"slack_{members['admin'].pk}": "U0ADMIN", f"slack_{members['owner'].pk}": "U0ADMIN"},
    )

    assert answer.status_code == 422
    page = answer.content.decode()
    refused = page.split('id="slack-refused">', 1)[1].split("</div>", 1)[0]
    assert "Each Slack user can be linked to one member only." in refused


def test_the_bot_token_is_an_owners_write_only_field(client_for, site, slack_api):
    owner_page = client_for("owner").get("/settings/slack/").content.decode()
    assert 'name="bot_token"' in owner_page and slack_api.token not in owner_page
    admin_page = client_for("admin").get("/settings/slack/").content.decode()
    assert (
        'name="bot_token"' not in admin_page and "Only an owner can set or remove it" in admin_page
    )


def test_only_managers_see_slack_settings(client_for):
    assert client_for("reviewer").get("/settings/slack/").status_code == 403
    assert client_for("staff").post("/settings/slack/", {"webhook_url": HOOK}).status_code == 403


def test_the_response_url_stays_out_of_the_task_headers(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """Slack's response_url lets anyone holding it post into the channel: the queued task
    carries it in its body, but the headers (what monitoring and failure logs show) do not."""
    from celery.signals import before_task_publish

    from sill.celery import app

    published: list[dict] = []

    def seen(sender=None, headers=None, body=None, **_):
        published.append({"task": sender, "args": body[0], **headers})

    before_task_publish.connect(seen)
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    try:
        with django_capture_on_commit_callbacks(execute=True):
            answer = click(site, held.id, user="U0OWNER", response_url=slack)
        # What a worker does with the queued click, here: it queues the message's update.
        [queued] = [p for p in published if p["task"] == "refunds.slack_decide"]
        with django_capture_on_commit_callbacks(execute=True):
            app.tasks["refunds.slack_decide"](*queued["args"])
    finally:
        app.conf.task_always_eager = eager
        before_task_publish.disconnect(seen)
        app.control.purge()
    assert answer.status_code == 200
    [decide] = [p for p in published if p["task"] == "refunds.slack_decide"]
    assert slack not in decide["argsrepr"] and "<response_url>" in decide["argsrepr"]
    [respond] = [p for p in published if p["task"] == "refunds.slack_respond"]
    assert slack not in respond["argsrepr"] and "<response_url>" in respond["argsrepr"]
    assert "approved" in respond["argsrepr"]  # the outcome text is no secret
    [execute] = [p for p in published if p["task"] == "refunds.execute"]
    assert execute["argsrepr"] == repr((held.id,))


def test_a_click_leaves_no_response_url_in_a_debug_log(
    site, linked, held, slack, django_capture_on_commit_callbacks, caplog
):
    """At SILL_LOG_LEVEL=DEBUG slack_sdk wrote every URL it posts to, the click's response_url
    among them (a capability: whoever reads the log could post into the merchant's channel).
    Its loggers stay at INFO whatever the root's level (sill/settings.py's LOGGING)."""
    with caplog.at_level(logging.DEBUG), django_capture_on_commit_callbacks(execute=True):
        assert logging.getLogger("refunds").isEnabledFor(logging.DEBUG)  # as on-call sets it
        answer = click(site, held.id, user="U0OWNER", response_url=slack)
    assert answer.status_code == 200
    [update] = Slack.received  # the message was replaced through it
    assert "approved" in update["text"]
    secret = urlsplit(slack).path  # "/actions/T1/123/abc", in whatever form a logger writes it
    leaked = [r.getMessage() for r in caplog.records if secret in r.getMessage()]
    assert leaked == []


@pytest.mark.parametrize(
    "timestamp", ["soon", "", "1e3", "9" * 400], ids=["words", "empty", "exponent", "too-long"]
)
def test_a_click_with_a_timestamp_that_is_not_a_number_is_refused(
    site, linked, held, slack, timestamp
):
    """The timestamp header is the sender's text: anything but whole seconds is a bad
    signature (400), never a 500."""
    body = urlencode({"payload": json.dumps({"type": "block_actions"})}).encode()
    base = b"v0:" + timestamp.encode() + b":" + body
    signature = "v0=" + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest()
    answer = Client(raise_request_exception=False).post(
        f"/slack/interactions/{site.pk}", data=body,
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE=signature,
    )  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_signature"
    held.refresh_from_db()
    assert held.status == "held" and Slack.received == []


def test_a_replayed_click_is_refused_and_changes_nothing(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """The same signed request sent again within the five minutes (captured on the way, or
    resent by a proxy) is a replay: 400, and nothing is queued, decided or said in Slack."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U0ADMIN", "username": "someone", "team_id": TEAM},
        "team": {"id": TEAM},
        "response_url": slack,
        "actions": [{"action_id": "sill_reject", "value": held.id, "type": "button"}],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time()))
    base = b"v0:" + timestamp.encode() + b":" + body
    headers = {
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp,
        "HTTP_X_SLACK_SIGNATURE": "v0="
        + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest(),
    }

    def send():
        return Client().post(
            f"/slack/interactions/{site.pk}", data=body,
            content_type="application/x-www-form-urlencoded", **headers,
        )  # fmt: skip

    with django_capture_on_commit_callbacks(execute=True):
        assert send().status_code == 200
    held.refresh_from_db()
    assert held.status == "rejected"
    with django_capture_on_commit_callbacks(execute=True) as queued:
        replay = send()
    assert replay.status_code == 400 and replay.json()["error"]["code"] == "bad_signature"
    assert queued == []
    assert len(Slack.received) == 1  # only the first click's outcome
    assert AuditRecord.objects.filter(site=site, kind="escalated_rejected").count() == 1


def test_a_queued_click_is_acknowledged_on_receipt():
    """A click is a person's decision, made at most once: a worker lost mid-way drops it (the
    buttons stay, to click again) instead of its message going back to the queue and being
    decided again, up to the visibility timeout later. Tasks are acknowledged late by default
    (CELERY_TASK_ACKS_LATE), so this one must say otherwise."""
    from sill.celery import app

    decide = app.tasks["refunds.slack_decide"]
    assert decide.acks_late is False


@pytest.mark.parametrize("signature", ["v0=\xe9" * 22, "\xff", "v0=" + "A" * 64, ""])
def test_a_click_with_a_signature_that_is_not_slacks_is_refused(site, linked, held, signature):
    """A signature header that is not ``v0=`` and 64 hex digits (non-ASCII text, say, which
    hmac.compare_digest will not compare) is a bad signature (400), never a 500."""
    answer = Client(raise_request_exception=False).post(
        f"/slack/interactions/{site.pk}", data=b"payload=%7B%7D",
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=str(int(time.time())), HTTP_X_SLACK_SIGNATURE=signature,
    )  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_signature"
    held.refresh_from_db()
    assert held.status == "held"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"payload=\xff\xfe", "application/x-www-form-urlencoded"),
        (b"\xc3\x28", "text/plain"),
        (b"payload=%7B%7D\xed\xa0\x80", "application/octet-stream"),  # a UTF-8 surrogate
    ],
    ids=["form", "text", "surrogate"],
)
def test_a_body_that_is_not_utf8_is_a_bad_signature_not_a_500(
    site, linked, held, body, content_type
):
    """Slack's signature is over UTF-8 text, and slack_sdk decodes the body before hashing it:
    a body that is not UTF-8 (sent by anyone, with a fresh timestamp and any 64 hex digits)
    raised UnicodeDecodeError there, a 500. Slack never signs such a body: a bad signature."""
    timestamp = str(int(time.time()))
    signature = (
        "v0="
        + hmac.new(
            SECRET.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256
        ).hexdigest()
    )
    answer = Client(raise_request_exception=False).post(
        f"/slack/interactions/{site.pk}", data=body, content_type=content_type,
        HTTP_X_SLACK_REQUEST_TIMESTAMP=timestamp, HTTP_X_SLACK_SIGNATURE=signature,
    )  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_signature"
    held.refresh_from_db()
    assert held.status == "held"


def test_an_approval_sill_refuses_is_not_said_to_be_a_rejection(
    site, linked, held, slack, django_capture_on_commit_callbacks
):
    """The owner clicked Approve and Sill refused it (a dispute opened since the hold): the
    channel's message said the refund was "rejected … by owner@…", and a later click was told
    the owner "had already rejected" it."""
    open_dispute(held)
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
        click(site, held.id, user="U0ADMIN", response_url=slack)
    update, refusal, again, late = Slack.received
    assert update["replace_original"] and "rejected" not in update["text"]
    assert (
        "approved by owner@roasters.example, and Sill refused it: nothing was refunded "
        "(the charge is disputed)." in update["text"]
    )
    assert refusal["response_type"] == "ephemeral" and "dispute" in refusal["text"]
    assert again["text"] == update["text"]
    assert late["response_type"] == "ephemeral" and "rejected" not in late["text"]
    assert "owner@roasters.example had already approved this refund in Slack" in late["text"]
    assert "and Sill refused it (the charge is disputed); nothing was refunded." in late["text"]


def test_the_refund_page_says_the_decision_was_made_in_slack(
    site, linked, held, slack, client_for, django_capture_on_commit_callbacks
):
    """The held page and the refund page's status said "owner@… in Slack"; the timeline's
    review step, the record of it, said only "Approved by owner@…"."""
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    body = client_for("admin").get(f"/refunds/{held.id}/").content.decode()
    assert '<strong class="step-title">Approved by owner@roasters.example in Slack</strong>' in body


def test_activity_says_where_each_held_refund_was_decided(
    site, linked, held, original, agent, slack, client_for, django_capture_on_commit_callbacks
):
    """The refund page said "Rejected by admin@… in Slack"; Activity's "By" column and its CSV
    said only "admin@…", the same as for a decision made in Sill."""
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0ADMIN", action="sill_reject", response_url=slack)
    in_sill = hold_refund(order=original, agent=agent)
    owner = client_for("owner")
    assert owner.post(f"/held/{in_sill.id}/reject/").status_code == 302
    decided = [row for row in activity_rows(owner) if "Rejected" in row]
    assert [activity_cell(row, ACTIVITY_BY) for row in decided] == [
        "owner@roasters.example in Sill",
        "admin@roasters.example in Slack",
    ]
    export = b"".join(owner.get("/activity/?format=csv").streaming_content).decode()
    rows = csv.DictReader(io.StringIO(export))
    actors = [row["actor"] for row in rows if row["kind"] == AuditKind.ESCALATED_REJECTED.label]
    assert actors == ["admin@roasters.example in Slack", "owner@roasters.example in Sill"]
