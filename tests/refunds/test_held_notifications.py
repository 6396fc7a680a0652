"""Owners and admins hear about a held refund once: email with a link, and Slack if set."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail
from django.db import transaction

from refunds.review.decisions import reject_refund
from refunds.review.notifications import notify_held_refund, notify_pending_held_refunds
from refunds.review.slack import seal_webhook_url
from refunds.services import notify_hold
from refunds.tasks import notify_pending_held_refunds_task
from tests.rails.loopback import start_serving
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _team(members):
    """Every role on the site, so the tests see who is (and is not) emailed."""
    return members


@dataclass
class Webhook:
    url: str
    status: int = 200
    posts: list[tuple[str, dict]] = field(default_factory=list)


@pytest.fixture
def slack() -> Iterator[Webhook]:
    """A loopback stand-in for a Slack incoming webhook: records what it is sent."""
    hook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            hook.posts.append(
                (self.headers.get("Content-Type", ""), json.loads(self.rfile.read(length)))
            )
            self.send_response(hook.status)
            self.end_headers()
            self.wfile.write(b"ok" if hook.status == 200 else b"no_service")

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_port}/services/T000/B000/XXXX"
    start_serving(server)
    yield hook
    server.shutdown()
    server.server_close()


def test_it_emails_owners_and_admins_once_when_the_hold_commits(
    held, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        notify_hold(held)
    # One message each (one refused address refuses nobody else's: test_held_mail_refused.py),
    # in the same words: both roles decide held refunds.
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    owners, admins = sorted(mail.outbox, key=lambda m: m.to[0], reverse=True)
    assert owners.body == admins.body and owners.subject == admins.subject
    message = mail.outbox[0]
    assert "Refund request · Wrong item · up to $89.00" in message.subject
    assert f"/held/{held.id}/" in message.body
    assert f"Requested by: {held.agent.name} (agent)" in message.body  # its name, not its id
    # The rules that held it by name, and the facts in words (not codes).
    assert "Held by: Human review on destructive actions (r07) (hold for approval)" in message.body
    assert "Facts: " in message.body and "refundFraction" not in message.body
    # The sweep, a repeated hook and a direct call all find it already sent.
    assert notify_pending_held_refunds_task.apply().get() == 0
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        notify_hold(held)
    assert notify_held_refund(refund_id=held.id) is False
    assert len(mail.outbox) == 2


def test_the_sweep_sends_what_the_hook_missed_once(original, agent, make_order):
    first = hold_refund(order=original, agent=agent)
    second = hold_refund(order=make_order(), agent=agent)
    assert notify_pending_held_refunds_task.apply().get() == 2
    assert notify_pending_held_refunds_task.apply().get() == 0
    bodies = [m.body for m in mail.outbox]
    assert len(bodies) == 4  # the owner's and the admin's of each
    for refund in (first, second):
        assert sum(f"/held/{refund.id}/" in body for body in bodies) == 2


def test_it_tells_nobody_about_a_refund_that_is_no_longer_held(held, members):
    reject_refund(refund=held, actor=members["owner"].user)
    assert notify_pending_held_refunds() == 0
    assert notify_held_refund(refund_id=held.id) is False
    assert mail.outbox == []


def test_it_posts_to_the_sites_slack_webhook(held, slack):
    held.site.slack_webhook_sealed = seal_webhook_url(held.site, slack.url)
    held.site.save()
    assert notify_held_refund(refund_id=held.id) is True
    [(content_type, payload)] = slack.posts
    assert content_type.startswith("application/json")
    assert set(payload) == {"text", "blocks"}
    assert "Refund request · Wrong item · up to $89.00" in payload["text"]
    section, actions = payload["blocks"]
    assert "Facts: " in section["text"]["text"] and "Human review" in section["text"]["text"]
    buttons = {b["action_id"]: b for b in actions["elements"]}
    assert buttons["sill_approve"]["value"] == held.id and "confirm" in buttons["sill_approve"]
    assert buttons["sill_reject"]["value"] == held.id
    assert buttons["sill_open"]["url"].endswith(f"/held/{held.id}/")
    assert len(mail.outbox) == 2


def test_a_failing_slack_webhook_is_logged_and_the_email_still_goes(held, slack, caplog):
    slack.status = 500
    held.site.slack_webhook_sealed = seal_webhook_url(held.site, slack.url)
    held.site.save()
    with caplog.at_level(logging.WARNING, logger="refunds.review.slack"):
        assert notify_held_refund(refund_id=held.id) is True
    assert len(slack.posts) == 1 and len(mail.outbox) == 2
    assert "Slack webhook post failed" in caplog.text
    assert slack.url not in caplog.text  # the webhook URL is a secret


def test_the_webhook_url_stays_out_of_a_debug_log(held, slack, caplog):
    # At SILL_LOG_LEVEL=DEBUG slack_sdk wrote the URL of every post (and the answer's): the
    # webhook URL lets whoever holds it post into the merchant's channel.
    held.site.slack_webhook_sealed = seal_webhook_url(held.site, slack.url)
    held.site.save()
    with caplog.at_level(logging.DEBUG):
        assert notify_held_refund(refund_id=held.id) is True
    assert len(slack.posts) == 1
    assert "/services/T000/B000/XXXX" not in caplog.text


def test_an_unreachable_slack_webhook_does_not_raise(held, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    held.site.slack_webhook_sealed = seal_webhook_url(held.site, f"http://127.0.0.1:{port}/hook")
    held.site.save()
    with caplog.at_level(logging.WARNING, logger="refunds.review.slack"):
        assert notify_held_refund(refund_id=held.id) is True
    assert "Slack webhook post failed" in caplog.text
    assert len(mail.outbox) == 2


def test_a_webhook_sealed_under_another_key_is_skipped_and_the_email_still_goes(
    held, slack, caplog, settings
):
    held.site.slack_webhook_sealed = seal_webhook_url(held.site, slack.url)
    held.site.save()
    settings.SECRET_KEY = "another-key-" + "x" * 50  # rotated without keeping the old key
    with caplog.at_level(logging.WARNING, logger="refunds.review.slack"):
        assert notify_held_refund(refund_id=held.id) is True
    assert slack.posts == [] and len(mail.outbox) == 2
    assert "Slack webhook cannot be decrypted" in caplog.text


def test_the_webhook_is_bound_to_its_site(held, slack, other_site):
    # A sealed URL copied onto another site's row does not open there.
    held.site.slack_webhook_sealed = seal_webhook_url(other_site, slack.url)
    held.site.save()
    assert notify_held_refund(refund_id=held.id) is True
    assert slack.posts == []


def test_an_email_that_fails_is_sent_by_the_next_attempt(held, settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    with pytest.raises(OSError):
        notify_held_refund(refund_id=held.id)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notify_pending_held_refunds() == 1
    assert len(mail.outbox) == 2


def test_a_deactivated_owner_is_not_emailed(held, members):
    """A deactivated account is locked out of Sill (its sessions end, Slack refuses its
    clicks): it no longer hears about the site's refunds and their buyers either."""
    owner = members["owner"].user
    owner.is_active = False
    owner.save()
    assert notify_held_refund(refund_id=held.id)
    [message] = mail.outbox
    assert message.to == ["admin@roasters.example"]


def test_whoever_asked_is_told_another_decides_not_to_decide(original, members):
    """Seen: an admin who asked for a staff refund that was held got "Decide before …" and a
    Review link, though Sill refuses their approval (whoever asks cannot approve)."""
    held = hold_refund(order=original, requested_by=members["admin"].user, reason_code="defective")

    assert notify_held_refund(refund_id=held.id) is True

    by_address = {m.to[0]: m for m in mail.outbox}
    asked, owner = by_address["admin@roasters.example"], by_address["owner@roasters.example"]
    assert asked.subject == owner.subject
    assert "Decide before" in owner.body and "Review it:" in owner.body
    assert "Decide before" not in asked.body and "Review it:" not in asked.body
    assert "You asked for it, so another owner or admin decides it" in asked.body
    assert "See it: http" in asked.body and f"/held/{held.id}/" in asked.body
    # The rest of the message is the owner's, word for word.
    assert asked.body.split("You asked for it")[0] == owner.body.split("Decide before")[0]
