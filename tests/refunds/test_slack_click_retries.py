"""A Slack click that meets a database error (a lost connection, a lock timeout) is tried again
after a backoff instead of being lost (the member had to click again), and a retry never
decides twice: the refund refuses a second decision, and a retry that finds the clicker's own
decision made answers it as the click's. The retried message shows no response_url in its
headers, as the first did not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from celery.exceptions import Retry
from celery.signals import before_task_publish

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.review.decisions import approve_refund, reject_refund
from refunds.tasks import slack_decide_task
from sill.accounts.models import Membership, Site
from sill.celery import app
from tests.refunds.slack_stub import TEAM
from tests.refunds.test_slack_approvals import (  # noqa: F401 (fixtures)
    Slack,
    click,
    held,
    linked,
    slack,
)
from tests.test_database_down import postgresql_refusing
from tests.threads import row_locked_elsewhere
from tests.worker import running_worker, wait_for

Capture = Callable[..., Any]


def _decisions(refund: Refund) -> int:
    kinds = ("escalated_approved", "escalated_rejected")
    return AuditRecord.objects.filter(site_id=refund.site_id, kind__in=kinds).count()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.worker
def test_a_click_that_meets_a_lock_timeout_is_decided_by_a_retry(
    tmp_path: Path,
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
) -> None:
    # Seen: the worker's decision gave up on a lock (or lost its connection), the task failed
    # and the click was gone: the refund stayed held until the member clicked again.
    log = tmp_path / "worker.log"
    env = {"SILL_DB_LOCK_TIMEOUT_SECONDS": "1", "SILL_SLACK_RESPONSE_HOSTS": "127.0.0.1"}
    with running_worker(log, **env):
        # Held for 3 s from the click: its first attempt gives up after 1 s, a retry decides.
        with row_locked_elsewhere(Refund, held.id, release_after=3):
            answer = click(site, held.id, user="U0OWNER", response_url=slack)
            assert answer.status_code == 200
            wait_for(lambda: not Refund.objects.filter(pk=held.id, status="held").exists(),
                     timeout=60, what="the decision")  # fmt: skip
        wait_for(lambda: bool(Slack.received), timeout=30, what="the message's update")
    held.refresh_from_db()
    assert held.status in ("processing", "succeeded")
    assert held.decided_by == linked["owner"].user
    assert _decisions(held) == 1
    [update] = Slack.received
    assert update["replace_original"] is True and "approved" in update["text"]
    worker_log = log.read_text()  # the first attempt met the lock, a retry decided it
    assert "refunds.slack_decide" in worker_log and "retry: Retry in" in worker_log
    assert "lock timeout" in worker_log and slack not in worker_log


def test_a_retried_click_never_decides_twice(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
    django_capture_on_commit_callbacks: Capture,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        click(site, held.id, user="U0OWNER", response_url=slack)
    held.refresh_from_db()
    decided = held.status
    # The same click again, as a retry: its first attempt committed the decision, then met a
    # database error (a connection lost as it answered COMMIT, say).
    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    with django_capture_on_commit_callbacks(execute=True):
        assert slack_decide_task.apply(args, retries=1).get() == decided
    held.refresh_from_db()
    assert (held.status, held.decided_by) == (decided, linked["owner"].user)
    assert _decisions(held) == 1
    # The outcome, twice (the message replaced again), and no "already approved" to the
    # clicker, who clicked once.
    assert [m.get("response_type") for m in Slack.received] == [None, None]
    assert all(m["replace_original"] and "approved" in m["text"] for m in Slack.received)
    # Another click of the member's own, not a retry, is still told why nothing happened.
    with django_capture_on_commit_callbacks(execute=True):
        assert slack_decide_task.apply(args).get() == "refused"
    assert Slack.received[-1]["response_type"] == "ephemeral"
    assert _decisions(held) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_retried_click_shows_no_response_url_in_its_headers(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
) -> None:
    published: list[dict[str, Any]] = []

    def seen(sender: Any = None, headers: Any = None, **_: Any) -> None:
        published.append({"task": sender, **headers})

    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    before_task_publish.connect(seen)
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    # As a worker runs the queued click: its request names the message it came in. (Any:
    # celery-types types push_request's keywords as the task's own.)
    task: Any = slack_decide_task
    task.push_request(
        id="click-1", args=args, kwargs={}, retries=0, is_eager=False, called_directly=False,
        argsrepr=repr((*args[:4], "<response_url>", args[5])), kwargsrepr="{}", delivery_info={},
    )  # fmt: skip
    try:
        with postgresql_refusing("down"), pytest.raises(Retry):
            slack_decide_task.run(*args)
    finally:
        slack_decide_task.pop_request()
        app.conf.task_always_eager = eager
        before_task_publish.disconnect(seen)
        app.control.purge()
    [retry] = [p for p in published if p["task"] == "refunds.slack_decide"]
    assert retry["retries"] == 1
    assert slack not in retry["argsrepr"] and "<response_url>" in retry["argsrepr"]
    held.refresh_from_db()
    assert held.status == "held" and _decisions(held) == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_click_whose_last_retry_fails_tells_the_clicker_it_was_not_recorded(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Seen: the database stayed away for the two minutes of retries; the last one raised, the
    # click was dropped, and the owner in Slack waited for an outcome that never came.
    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    last = slack_decide_task.max_retries
    with postgresql_refusing("down"), caplog.at_level("INFO"):
        assert slack_decide_task.apply(args, retries=last).get() == "not recorded"
    [told] = Slack.received
    assert told["response_type"] == "ephemeral" and told["replace_original"] is False
    assert "not recorded" in told["text"] and "decided nothing" in told["text"]
    assert "Click again" in told["text"] and "decide it in Sill" in told["text"]
    [gave_up] = [r for r in caplog.records if r.levelname == "ERROR"]
    said = gave_up.getMessage()
    assert held.id in said and "U0OWNER" in said and "OperationalError" in said
    secret = urlsplit(slack).path
    assert not [r for r in caplog.records if secret in r.getMessage()]
    held.refresh_from_db()
    assert held.status == "held" and _decisions(held) == 0


def test_a_retry_that_finds_the_clickers_own_decision_in_sill_says_so(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Seen: the click's first attempt met a database error; meanwhile the owner approved it in
    # the browser; the retry took that approval for its own and told the owner nothing.
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=linked["owner"].user, note="checked the parcel")
    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    with django_capture_on_commit_callbacks(execute=True):
        assert slack_decide_task.apply(args, retries=1).get() == "refused"
    update, told = Slack.received
    assert update["replace_original"] is True and "approved" in update["text"]
    assert told["response_type"] == "ephemeral"
    assert told["text"].startswith("Your click decided nothing: you had already approved")
    assert "in Sill" in told["text"]
    assert _decisions(held) == 1


def test_a_browser_decision_whose_note_reads_like_slacks_is_not_taken_for_the_click(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
    django_capture_on_commit_callbacks: Capture,
) -> None:
    # Seen: a retry told its own decision from a browser one by the review note alone, so the
    # owner's browser approval with the note "Decided in Slack" (typed, or pasted) was taken
    # for the click's own and the owner was never told their click decided nothing. Where a
    # decision was made is now recorded with it (Refund.decided_via, the record's "via").
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=linked["owner"].user, note="Decided in Slack")
    held.refresh_from_db()
    assert held.decided_via == "sill"
    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    with django_capture_on_commit_callbacks(execute=True):
        assert slack_decide_task.apply(args, retries=1).get() == "refused"
    told = Slack.received[-1]
    assert told["response_type"] == "ephemeral"
    assert told["text"].startswith("Your click decided nothing: you had already approved")
    assert "in Sill" in told["text"]
    assert _decisions(held) == 1


@pytest.mark.parametrize("how", ["in Sill", "in Slack"])
def test_a_retry_that_finds_someone_elses_decision_names_who_and_how(
    site: Site,
    linked: dict[str, Membership],  # noqa: F811
    held: Refund,  # noqa: F811
    slack: str,  # noqa: F811
    how: str,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    via = "slack" if how == "in Slack" else "sill"
    with django_capture_on_commit_callbacks(execute=True):
        reject_refund(refund=held, actor=linked["admin"].user, via=via)
    args = (site.pk, "sill_approve", held.id, "U0OWNER", slack, [TEAM])
    with django_capture_on_commit_callbacks(execute=True):
        assert slack_decide_task.apply(args, retries=1).get() == "refused"
    told = Slack.received[-1]
    assert told["response_type"] == "ephemeral"
    assert told["text"].startswith(
        f"Your click decided nothing: admin@roasters.example had already rejected this refund {how}"
    )
    held.refresh_from_db()
    assert held.status == "rejected" and held.decided_by == linked["admin"].user
