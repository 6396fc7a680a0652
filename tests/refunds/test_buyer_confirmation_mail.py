"""The buyer's confirmation (``refunds.send_confirmation``, enqueued once the rail refunded):
sent to the order's address; a mail server that is down is tried again; one that refuses the
message is not by the task (the sweep tries it later: tests/refunds/test_missed_outcome_emails.py),
and what it said (the buyer's address, its reply) stays out of the log.

Seen: a refused confirmation failed the task, and the failure's log kept the server's error,
the buyer's address in it; a server that was down lost the confirmation, never tried again."""

from __future__ import annotations

import logging

import pytest
from celery.exceptions import Retry
from django.core import mail

from refunds.execution import execute_refund
from refunds.models import Refund
from refunds.tasks import send_refund_confirmation_task
from tests.failing_mail import PATH, REFUSING_SOME, REPLY, RefusingBackend

pytestmark = pytest.mark.django_db


@pytest.fixture
def refunded(order, staff_refund, django_capture_on_commit_callbacks) -> Refund:
    """A staff refund the rail made; its confirmation not sent yet (the test runs the task)."""
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(refund.id) == "succeeded"
    mail.outbox.clear()
    return refund


def test_the_buyer_is_told_once_the_rail_refunded(refunded):
    assert send_refund_confirmation_task.apply(args=[refunded.pk]).successful()

    [message] = mail.outbox
    assert message.to == [refunded.order.buyer_email]
    assert message.subject == (
        f"Your refund from {refunded.site.name}: $89.00 for order #{refunded.order.number}"
    )
    assert "$89.00" in message.body and f"#{refunded.order.number}" in message.body


def test_a_refused_confirmation_is_logged_without_the_address_and_not_retried_by_the_task(
    refunded, settings, caplog
):
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = [refunded.order.buyer_email]

    with caplog.at_level(logging.INFO):
        result = send_refund_confirmation_task.apply(args=[refunded.pk])

    assert result.successful()  # not failed, so not retried, and no failure log
    assert mail.outbox == []
    assert [r.getMessage() for r in caplog.records if r.name == "refunds.confirmations"] == [
        f"refund {refunded.pk}: buyer's confirmation email refused (SMTPRecipientsRefused); "
        "tried again in 5 minutes"
    ]
    assert refunded.order.buyer_email not in caplog.text and REPLY not in caplog.text


def test_a_mail_server_that_is_down_is_tried_again(refunded, settings):
    settings.EMAIL_BACKEND = PATH
    RefusingBackend.offered = 0

    # Eager tasks raise the retry they ask for (a worker schedules it, with a backoff).
    with pytest.raises(Retry) as retry:
        send_refund_confirmation_task.apply(args=[refunded.pk])

    assert RefusingBackend.offered == 1
    assert isinstance(retry.value.exc, OSError)
    assert send_refund_confirmation_task.max_retries == 5


def test_a_confirmation_greylisted_for_now_is_tried_again(refunded, settings, caplog):
    """A 4xx refusal is the server asking for the message later, not refusing it."""
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_GREYLISTED_ADDRESSES = [refunded.order.buyer_email]

    with pytest.raises(Retry):
        send_refund_confirmation_task.apply(args=[refunded.pk])

    assert mail.outbox == []
    settings.MAIL_GREYLISTED_ADDRESSES = []
    assert send_refund_confirmation_task.apply(args=[refunded.pk]).successful()
    assert [m.to for m in mail.outbox] == [[refunded.order.buyer_email]]
