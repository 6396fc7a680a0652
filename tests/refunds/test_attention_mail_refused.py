"""A mail server that refuses one refund's attention email (an owner's address it no longer
accepts, or the message itself) keeps neither the other refunds nor the other owners and
admins from being told. The refused refund stays untold and is tried again later, waiting
longer after each refusal; the log names the error's class and the refund, never an address
or the server's reply. A server that is down still ends the sweep's run, as before.

Seen: ``refunds.check_attention`` stopped at the first email error and always began with the
oldest refund, so one refused message kept every later refund's owners from hearing, every
minute, for good."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.core import mail
from django.utils import timezone

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from refunds.reconcile.attention import notify_missed_attention
from refunds.tasks import check_attention_refunds_task, notify_attention_task
from tests.failing_mail import (
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

pytestmark = pytest.mark.django_db

LOGGER = "refunds.reconcile.attention"


@pytest.fixture
def flag(staff_refund, mock_rail, make_order, django_capture_on_commit_callbacks):
    """``flag(total, minutes_ago)``: a staff refund of an order of ``total`` whose answer was
    lost, then the rail switched off: it needs attention since then, nobody told."""

    def make(total: str, minutes_ago: int) -> Refund:
        mock_rail.enabled = True
        mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
        mock_rail.save()
        refund = staff_refund(make_order(total=total))
        with pytest.raises(RetryLater):
            execute_refund(refund.id)
        mock_rail.enabled = False
        mock_rail.save()
        with django_capture_on_commit_callbacks(execute=False):  # its email is the sweep's
            assert execute_refund(refund.id) == "needs_attention"
        since = timezone.now() - timedelta(minutes=minutes_ago)
        Refund.objects.filter(pk=refund.pk).update(attention_since=since)
        return refund

    return make


def told(refund: Refund) -> bool:
    return Refund.objects.filter(pk=refund.pk, attention_notified_at__isnull=False).exists()


def warnings(caplog) -> list[str]:
    return warnings_of(caplog, LOGGER)


def test_a_refused_email_skips_its_refund_and_the_sweep_tells_the_others(flag, settings, caplog):
    oldest, later = flag("25.00", 60), flag("31.00", 5)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = ["· $25.00"]

    with caplog.at_level(logging.WARNING):
        check_attention_refunds_task.apply().get()

    assert told(later) and not told(oldest)
    assert sorted(m.to for m in mail.outbox) == DECIDERS_TOLD
    assert all(later.idempotency_key in m.body for m in mail.outbox)
    assert warnings(caplog) == [
        f"refund {oldest.pk}: attention email refused (SMTPDataError); tried again in 5 minutes"
    ]
    assert "mail is failing" not in caplog.text  # not an outage
    assert_nothing_secret_logged(caplog)


def test_a_refused_refund_is_tried_again_later_each_wait_longer_until_it_is_told(
    flag, settings, caplog
):
    refund = flag("25.00", 60)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = ["· $25.00"]
    sweep_at = sweeps_at(notify_missed_attention, caplog=caplog, logger=LOGGER)

    refused = f"refund {refund.pk}: attention email refused (SMTPDataError); tried again in"
    assert sweep_at(0) == [f"{refused} 5 minutes"]
    assert sweep_at(4.9) == []
    assert sweep_at(5.1) == [f"{refused} 10 minutes"]
    assert sweep_at(15) == []
    settings.MAIL_REFUSED_SUBJECTS = []
    assert sweep_at(15.2) == []
    assert told(refund) and len(mail.outbox) == 2


def test_one_refused_address_does_not_keep_the_other_deciders_from_being_told(
    flag, settings, caplog
):
    # Seen: one message went to every owner and admin, so a server refusing one of them
    # refused it for all.
    refund = flag("25.00", 5)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = ["admin@roasters.example"]

    with caplog.at_level(logging.WARNING):
        check_attention_refunds_task.apply().get()

    [message] = mail.outbox
    assert message.to == ["owner@roasters.example"] and told(refund)
    assert warnings(caplog) == [
        f"refund {refund.pk}: attention email refused for a recipient "
        "(SMTPRecipientsRefused); the others were told"
    ]
    assert_nothing_secret_logged(caplog)


def test_a_mail_server_that_is_down_still_ends_the_run_and_nobody_waits_for_it(
    flag, settings, caplog
):
    first, second = flag("25.00", 60), flag("31.00", 5)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = DOWN
    RefusingBackend.offered = 0

    with caplog.at_level(logging.WARNING, logger="refunds.tasks"):
        check_attention_refunds_task.apply().get()

    assert RefusingBackend.offered == 1  # the first message: the run ended there
    assert not told(first) and not told(second)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "refunds.tasks"]
    assert warning == ("refund attention emails not sent: mail is failing (SMTPServerDisconnected)")
    assert "Traceback" not in caplog.text and "Connection unexpectedly closed" not in caplog.text
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    check_attention_refunds_task.apply().get()  # the next minute: no wait after an outage
    assert told(first) and told(second) and len(mail.outbox) == 4


def test_a_server_down_part_way_tells_each_decider_once_across_the_retry(flag, site, settings):
    """Seen: the server took the admins' messages and went down before the owner's; the claim
    was given back and the task's retry sent the admins the same email again."""
    refund = flag("25.00", 5)
    add_second_admin(site)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = DOWN_PART_WAY
    settings.MAIL_TAKEN_BEFORE_OUTAGE = 2
    DownPartWayBackend.taken = 0

    with pytest.raises(Retry):
        notify_attention_task.apply(args=[refund.pk])

    assert messages_to() == dict.fromkeys(THREE_DECIDERS[:2], 1) and not told(refund)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    notify_attention_task.apply(args=[refund.pk]).get()  # the task's retry
    assert messages_to() == dict.fromkeys(THREE_DECIDERS, 1) and told(refund)
    assert all(refund.idempotency_key in m.body for m in mail.outbox)
    check_attention_refunds_task.apply().get()
    assert len(mail.outbox) == 3
