"""The emails of a refund's outcome are sent though their on-commit message is lost: owners and
admins told that a refund failed, or failed after settlement, and the buyer their refund went
through. Each is claimed on the refund row (``failure_notified_at``, ``reversal_notified_at``,
``confirmation_sent_at``) and the every-minute ``refunds.notify_missed_outcomes`` sends what
the on-commit task did not: once, however often it runs, and a refusal waits, then is tried
again. Refunds that failed or settled before the claims existed are not emailed again.

Seen: with the broker down the request that failed or reversed a refund raised after its
commit and nothing ever sent the email, so owners never heard that a buyer did not get their
money back; a refusal of every owner's message was never tried again; the buyer's confirmation
had no claim at all, so a redelivered task sent it twice."""

from __future__ import annotations

import importlib
import logging
from contextlib import nullcontext
from datetime import timedelta

import pytest
import time_machine
from django.apps import apps
from django.core import mail
from django.core.cache import cache
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from refunds.confirmations import CONFIRMATION_WINDOW
from refunds.execution import execute_refund
from refunds.models import Refund
from refunds.services import reverse_settled_refund
from refunds.tasks import (
    notify_failed_task,
    notify_missed_outcomes_task,
    notify_reversed_task,
    send_refund_confirmation_task,
)
from tests.broker_down import broker_unreachable
from tests.failing_mail import (
    DECIDERS_TOLD,
    REFUSING_SOME,
    assert_nothing_secret_logged,
    warnings_of,
)

pytestmark = pytest.mark.django_db

OWNER, ADMIN = "owner@roasters.example", "admin@roasters.example"
BUYER = "buyer@example.com"  # make_order's
LOGGERS = ("refunds.review.failures", "refunds.reconcile.rail_reports", "refunds.confirmations")
mark_told = importlib.import_module("refunds.migrations.0023_mark_outcomes_told").mark_told


def sweep() -> int:
    return notify_missed_outcomes_task.apply().get()


def _executed(refund: Refund, capture, *, broker_down: bool) -> str:
    """Run ``refund``'s execution; its on-commit messages sent to a broker nobody answers at,
    or (``broker_down`` False) not run at all: the test runs them, or the sweep."""
    with broker_unreachable() if broker_down else nullcontext(), capture(execute=broker_down):
        return execute_refund(refund.id)


@pytest.fixture
def fail(make_order, staff_refund, mock_rail, django_capture_on_commit_callbacks):
    """``fail(broker_down=…)``: a staff refund of a new order that the rail declined."""

    def make(*, broker_down: bool = False) -> Refund:
        mock_rail.config = {"refund": "decline"}
        mock_rail.save()
        refund = staff_refund(make_order())
        capture = django_capture_on_commit_callbacks
        assert _executed(refund, capture, broker_down=broker_down) == "failed"
        mail.outbox.clear()
        return refund

    return make


@pytest.fixture
def settle(make_order, staff_refund, mock_rail, django_capture_on_commit_callbacks):
    """``settle(broker_down=…)``: a staff refund of a new order that the rail made."""

    def make(*, broker_down: bool = False) -> Refund:
        mock_rail.config = {}
        mock_rail.save()
        refund = staff_refund(make_order())
        capture = django_capture_on_commit_callbacks
        assert _executed(refund, capture, broker_down=broker_down) == "succeeded"
        mail.outbox.clear()
        return Refund.objects.get(pk=refund.pk)

    return make


@pytest.fixture
def reverse(settle, django_capture_on_commit_callbacks):
    """``reverse(broker_down=…)``: a settled refund (its confirmation not sent) that the rail
    then reported failed; the owners' email's message lost, or not run at all."""

    def make(*, broker_down: bool = False) -> Refund:
        refund = settle()
        with (
            broker_unreachable() if broker_down else nullcontext(),
            django_capture_on_commit_callbacks(execute=broker_down),
        ):
            assert reverse_settled_refund(
                refund_id=refund.id, provider_refund_id=refund.provider_refund_id,
                message="the card was closed", source="evt_failed",
            )  # fmt: skip
        mail.outbox.clear()
        return refund

    return make


# kind: (fixture, its on-commit task, the subject it is told by, who is told, the warning's words)
KINDS = {
    "failed": ("fail", notify_failed_task, "[Sill] Refund failed:", DECIDERS_TOLD, "failure"),
    "reversed": (
        "reverse",
        notify_reversed_task,
        "[Sill] Refund failed after settlement:",
        DECIDERS_TOLD,
        "failed-after-settlement",
    ),
    "confirmed": (
        "settle",
        send_refund_confirmation_task,
        "Your refund from",
        None,  # the order's buyer
        "buyer's confirmation",
    ),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    fixture, task, subject, told, words = KINDS[request.param]
    return request.getfixturevalue(fixture), task, subject, told or [[BUYER]], words


def test_an_outcome_whose_message_was_lost_with_the_broker_is_emailed_by_the_sweep_once(
    kind, caplog
):
    make, task, subject, told, _ = kind
    with caplog.at_level(logging.WARNING, logger="sill.queue"):
        refund = make(broker_down=True)  # the request that failed it answered: nothing raised

    assert f"('{refund.pk}',) not sent" in caplog.text
    assert "refunds.notify_missed_outcomes sends it" in caplog.text
    assert mail.outbox == []

    assert sweep() == 1
    assert sorted(m.to for m in mail.outbox) == told
    assert all(m.subject.startswith(subject) for m in mail.outbox)
    # The next minute, the lost message delivered after all, or a flushed cache: nothing more.
    assert sweep() == 0
    assert task.apply(args=[refund.pk]).successful()
    cache.clear()
    assert sweep() == 0
    assert len(mail.outbox) == len(told)


def test_the_on_commit_task_and_the_sweep_send_one_email_between_them(kind):
    make, task, _, told, _ = kind
    refund = make()  # its on-commit message not run yet

    assert task.apply(args=[refund.pk]).successful()
    assert task.apply(args=[refund.pk]).successful()  # delivered twice (acknowledged late)
    assert sorted(m.to for m in mail.outbox) == told
    assert sweep() == 0
    assert len(mail.outbox) == len(told)


def test_a_refusal_for_good_waits_then_a_later_sweep_sends_it(kind, settings, caplog):
    make, _, _, told, words = kind
    refund = make()
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = [OWNER, ADMIN, BUYER]
    start = timezone.now()

    def sweep_at(minutes: float) -> tuple[int, list[str]]:
        caplog.clear()
        with (
            time_machine.travel(start + timedelta(minutes=minutes), tick=False),
            caplog.at_level(logging.WARNING),
        ):
            sent = sweep()
        return sent, warnings_of(caplog, *LOGGERS)

    refused = f"refund {refund.pk}: {words} email refused (SMTPRecipientsRefused); tried again in"
    assert sweep_at(0) == (0, [f"{refused} 5 minutes"])
    assert_nothing_secret_logged(caplog)
    assert sweep_at(4.9) == (0, [])  # waiting: not tried
    assert sweep_at(5.1) == (0, [f"{refused} 10 minutes"])
    assert mail.outbox == []
    settings.MAIL_REFUSED_ADDRESSES = []
    assert sweep_at(14) == (0, [])
    assert sweep_at(15.2) == (1, [])
    assert sorted(m.to for m in mail.outbox) == told
    assert sweep_at(16) == (0, [])
    assert len(mail.outbox) == len(told)


def test_a_buyer_is_not_confirmed_by_the_sweep_once_the_window_has_passed_or_the_refund_reversed(
    settle, reverse
):
    late = settle()
    reverse()  # settled, its confirmation unsent, then reversed: and told to the owners

    with time_machine.travel(timezone.now() + CONFIRMATION_WINDOW + timedelta(minutes=1)):
        assert sweep() == 1  # the reversal's email; neither confirmation
    assert all(not m.subject.startswith("Your refund") for m in mail.outbox)
    assert not Refund.objects.filter(pk=late.pk, confirmation_sent_at__isnull=False).exists()


def test_refunds_that_failed_or_settled_before_the_migration_are_not_emailed(fail, settle, reverse):
    failed, settled, reversed_ = fail(), settle(), reverse()
    # As the rows were before refunds 0022 added the columns: nothing recorded as told.
    Refund.objects.update(
        failure_notified_at=None, reversal_notified_at=None, confirmation_sent_at=None
    )

    mark_told(apps, None)

    assert sweep() == 0
    assert mail.outbox == []
    marked = Refund.objects.get(pk=failed.pk)
    assert marked.failure_notified_at == marked.updated_at
    assert Refund.objects.get(pk=reversed_.pk).reversal_notified_at is not None
    assert Refund.objects.get(pk=settled.pk).confirmation_sent_at == settled.settled_at
    # One that fails afterwards is emailed.
    later = fail()
    assert sweep() == 1
    assert sorted(m.to for m in mail.outbox) == DECIDERS_TOLD
    assert Refund.objects.get(pk=later.pk).failure_notified_at is not None


def test_the_sweep_runs_every_minute():
    task = PeriodicTask.objects.get(task="refunds.notify_missed_outcomes")
    assert task.enabled and (task.interval.every, task.interval.period) == (1, "minutes")
