"""A mail server that refuses one held refund's email (a decider's address it no longer
accepts, or the message itself) keeps neither the other held refunds nor the other owners and
admins from being told. The refused refund stays untold and is tried again later, waiting
longer after each refusal; the log names the error's class and the refund, never an address
or the server's reply. A server that is down still ends the sweep's run.

Seen: ``refunds.notify_pending_held`` stopped at the first email error and always began with
the oldest held refund, so one refused message kept every later refund's deciders from
hearing, every minute, until the refunds expired; and one message went to every owner and
admin, so one refused address refused it for all."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.core import mail
from django.utils import timezone

from refunds.models import Refund
from refunds.review.notifications import notify_pending_held_refunds
from refunds.tasks import notify_held_refund_task, notify_pending_held_refunds_task
from tests.failing_mail import (
    ADMIN2,
    DECIDERS_TOLD,
    DOWN_PART_WAY,
    REFUSING_SOME,
    THREE_DECIDERS,
    DownPartWayBackend,
    RefusingBackend,
    add_second_admin,
    assert_nothing_secret_logged,
    messages_to,
    sweeps_at,
    warnings_of,
)
from tests.failing_mail import PATH as DOWN
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

LOGGER = "refunds.review.notifications"


@pytest.fixture(autouse=True)
def _team(members):
    """Every role on the site: only the owner and the admin are told."""
    return members


@pytest.fixture
def hold(make_order, agent):
    """``hold(total, minutes_ago)``: the agent's refund of an order of ``total``, held since
    then; its on-commit email never ran (the sweep's to tell)."""

    def make(total: str, minutes_ago: int) -> Refund:
        at = timezone.now() - timedelta(minutes=minutes_ago)
        return hold_refund(order=make_order(total=total), agent=agent, held_at=at)

    return make


def told(refund: Refund) -> bool:
    return Refund.objects.filter(pk=refund.pk, held_notified_at__isnull=False).exists()


def warnings(caplog) -> list[str]:
    return warnings_of(caplog, LOGGER)


def test_a_refused_email_skips_its_refund_and_the_sweep_tells_the_others(hold, settings, caplog):
    oldest, later = hold("25.00", 60), hold("31.00", 5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = ["up to $25.00"]

    with caplog.at_level(logging.WARNING):
        assert notify_pending_held_refunds_task.apply().get() == 1

    assert told(later) and not told(oldest)
    assert sorted(m.to for m in mail.outbox) == DECIDERS_TOLD
    assert all(f"/held/{later.id}/" in m.body for m in mail.outbox)
    assert warnings(caplog) == [
        f"held refund {oldest.pk}: email refused (SMTPDataError); tried again in 5 minutes"
    ]
    assert "mail is failing" not in caplog.text  # not an outage
    assert_nothing_secret_logged(caplog)


def test_a_refused_refund_is_tried_again_later_each_wait_longer_until_it_is_told(
    hold, settings, caplog
):
    refund = hold("25.00", 60)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = ["up to $25.00"]
    sweep_at = sweeps_at(notify_pending_held_refunds, caplog=caplog, logger=LOGGER)

    refused = f"held refund {refund.pk}: email refused (SMTPDataError); tried again in"
    assert sweep_at(0) == [f"{refused} 5 minutes"]
    assert sweep_at(4.9) == []  # waiting: not tried
    assert sweep_at(5.1) == [f"{refused} 10 minutes"]
    assert sweep_at(15) == []
    settings.MAIL_REFUSED_SUBJECTS = []  # the server takes it now
    assert sweep_at(15.2) == []
    assert told(refund) and len(mail.outbox) == 2


def test_one_refused_address_does_not_keep_the_other_decider_from_being_told(
    hold, settings, caplog
):
    refund = hold("25.00", 5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = ["admin@roasters.example"]

    with caplog.at_level(logging.WARNING):
        assert notify_pending_held_refunds_task.apply().get() == 1

    [message] = mail.outbox
    assert message.to == ["owner@roasters.example"] and told(refund)
    assert "Decide before" in message.body and f"/held/{refund.id}/" in message.body
    assert warnings(caplog) == [
        f"held refund {refund.pk}: email refused for a recipient (SMTPRecipientsRefused); "
        "the others were told"
    ]
    assert_nothing_secret_logged(caplog)
    assert notify_pending_held_refunds_task.apply().get() == 0  # told: not sent again
    assert len(mail.outbox) == 1


def test_a_refusal_of_every_decider_is_not_retried_by_the_on_commit_task(hold, settings, caplog):
    refund = hold("25.00", 5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = ["owner@roasters.example", "admin@roasters.example"]

    with caplog.at_level(logging.WARNING):
        result = notify_held_refund_task.apply(args=[refund.pk])

    assert result.successful()  # not retried at once: the sweep tries again after the wait
    assert not told(refund) and mail.outbox == []
    assert warnings(caplog) == [
        f"held refund {refund.pk}: email refused (SMTPRecipientsRefused); tried again in 5 minutes"
    ]
    assert_nothing_secret_logged(caplog)
    caplog.clear()
    settings.MAIL_REFUSED_ADDRESSES = []
    assert notify_pending_held_refunds_task.apply().get() == 0  # waiting
    assert not told(refund) and warnings(caplog) == []


def test_a_mail_server_that_is_down_ends_the_run_and_nobody_waits_for_it(hold, settings, caplog):
    first, second = hold("25.00", 60), hold("31.00", 5)
    settings.EMAIL_BACKEND = DOWN
    RefusingBackend.offered = 0

    with caplog.at_level(logging.WARNING, logger="refunds.tasks"):
        assert notify_pending_held_refunds_task.apply().get() == 0

    assert RefusingBackend.offered == 1  # the first message: the run ended there
    assert not told(first) and not told(second)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "refunds.tasks"]
    assert warning == "held refund emails not sent: mail is failing (SMTPServerDisconnected)"
    assert "Traceback" not in caplog.text and "Connection unexpectedly closed" not in caplog.text
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notify_pending_held_refunds_task.apply().get() == 2  # no wait after an outage
    assert told(first) and told(second) and len(mail.outbox) == 4


def test_a_server_down_part_way_tells_each_decider_once_across_the_retry(hold, site, settings):
    """Seen: the server took the admins' messages and went down before the owner's; the claim
    was given back and the sweep sent the admins the same email again."""
    refund = hold("25.00", 5)
    add_second_admin(site)
    settings.EMAIL_BACKEND = DOWN_PART_WAY
    settings.MAIL_TAKEN_BEFORE_OUTAGE = 2
    DownPartWayBackend.taken = 0

    with pytest.raises(Retry):
        notify_held_refund_task.apply(args=[refund.pk])

    assert messages_to() == dict.fromkeys(THREE_DECIDERS[:2], 1) and not told(refund)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notify_pending_held_refunds_task.apply().get() == 1
    assert messages_to() == dict.fromkeys(THREE_DECIDERS, 1) and told(refund)
    assert notify_pending_held_refunds_task.apply().get() == 0
    assert len(mail.outbox) == 3


def test_a_greylisted_decider_is_told_once_the_server_takes_it_and_the_others_once(
    hold, site, settings, caplog
):
    """A 4xx for one decider is the server asking for their message later: the others are
    sent theirs at once, and only the greylisted one's is sent again."""
    refund = hold("25.00", 5)
    add_second_admin(site)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_GREYLISTED_ADDRESSES = ["admin@roasters.example"]

    with pytest.raises(Retry):
        notify_held_refund_task.apply(args=[refund.pk])
    with caplog.at_level(logging.WARNING):
        assert notify_pending_held_refunds_task.apply().get() == 0  # still greylisted

    assert messages_to() == {ADMIN2: 1, "owner@roasters.example": 1} and not told(refund)
    assert_nothing_secret_logged(caplog)
    settings.MAIL_GREYLISTED_ADDRESSES = []
    assert notify_pending_held_refunds_task.apply().get() == 1
    assert messages_to() == dict.fromkeys(THREE_DECIDERS, 1) and told(refund)
