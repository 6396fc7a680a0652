"""The emails that tell owners and admins a refund failed (``refunds.notify_failed``) or failed
after settlement (``refunds.notify_reversed``) go to each of them as a message of their own:
a mail server that refuses one address keeps nobody else from hearing. A refusal of every
message is logged (the error's class and the refund, never an address or the server's reply)
and not retried by the task, as the attention emails' task does not retry one: the refund
waits, then the sweep tries it again (tests/refunds/test_missed_outcome_emails.py); a server
that is down is retried by the task.

Seen: one message went to every owner and admin, so a server refusing one of them refused it
for all, and the task then sent that refused message again five times."""

from __future__ import annotations

import logging

import pytest
from celery.exceptions import Retry
from django.core import mail
from django.core.cache import cache

from refunds.execution import execute_refund
from refunds.models import Refund
from refunds.reconcile.rail_reports import notify_reversed
from refunds.review.failures import notify_failed
from refunds.services import reverse_settled_refund
from refunds.tasks import notify_failed_task, notify_reversed_task
from tests.failing_mail import (
    DOWN_PART_WAY,
    REFUSING_SOME,
    THREE_DECIDERS,
    DownPartWayBackend,
    add_second_admin,
    assert_nothing_secret_logged,
    messages_to,
    warnings_of,
)

pytestmark = pytest.mark.django_db

LOGGERS = {"refunds.review.failures", "refunds.reconcile.rail_reports"}
OWNER, ADMIN = "owner@roasters.example", "admin@roasters.example"


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()  # the claims that stop a second email live there


@pytest.fixture
def failed(order, staff_refund, mock_rail, django_capture_on_commit_callbacks) -> Refund:
    """A staff refund the rail declined; its email not sent yet (the test runs the task)."""
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(refund.id) == "failed"
    mail.outbox.clear()
    return refund


@pytest.fixture
def reversed_refund(order, staff_refund, django_capture_on_commit_callbacks) -> Refund:
    """A staff refund Sill settled that the rail then reported failed; its email not sent."""
    refund = staff_refund(order)
    assert execute_refund(refund.id) == "succeeded"
    refund.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=False):
        assert reverse_settled_refund(
            refund_id=refund.id, provider_refund_id=refund.provider_refund_id,
            message="the card was closed", source="evt_failed",
        )  # fmt: skip
    mail.outbox.clear()
    return refund


KINDS = {
    "failed": ("failed", notify_failed_task, notify_failed, "failure", "[Sill] Refund failed:"),
    "reversed": (
        "reversed_refund",
        notify_reversed_task,
        notify_reversed,
        "failed-after-settlement",
        "[Sill] Refund failed after settlement:",
    ),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    fixture, task, notify, words, subject = KINDS[request.param]
    return request.getfixturevalue(fixture), task, notify, words, subject


def warnings(caplog) -> list[str]:
    return warnings_of(caplog, *LOGGERS)


def test_one_refused_address_does_not_keep_the_other_decider_from_being_told(
    kind, settings, caplog
):
    refund, task, notify, words, subject = kind
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = [ADMIN]

    with caplog.at_level(logging.WARNING):
        assert task.apply(args=[refund.pk]).successful()

    [message] = mail.outbox
    assert message.to == [OWNER] and message.subject.startswith(subject)
    assert f"/orders/{refund.order_id}/" in message.body
    assert warnings(caplog) == [
        f"refund {refund.pk}: {words} email refused for a recipient (SMTPRecipientsRefused); "
        "the others were told"
    ]
    assert_nothing_secret_logged(caplog)
    settings.MAIL_REFUSED_ADDRESSES = []
    assert notify(refund_id=refund.pk) is False  # told: the owner is not sent it again
    assert len(mail.outbox) == 1


def test_a_refusal_of_every_decider_is_logged_and_left_to_the_sweep(kind, settings, caplog):
    refund, task, notify, words, _ = kind
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = [OWNER, ADMIN]

    with caplog.at_level(logging.WARNING):
        result = task.apply(args=[refund.pk])

    assert result.successful()  # the task does not send the refused message again
    assert mail.outbox == []
    assert warnings(caplog) == [
        f"refund {refund.pk}: {words} email refused (SMTPRecipientsRefused); "
        "tried again in 5 minutes"
    ]
    assert_nothing_secret_logged(caplog)
    # Nobody was told, so the claim was given back: a later try may still tell them.
    settings.MAIL_REFUSED_ADDRESSES = []
    assert notify(refund_id=refund.pk) is True
    assert sorted(m.to for m in mail.outbox) == [[ADMIN], [OWNER]]


def test_a_server_down_part_way_tells_each_decider_once_across_the_retries(kind, site, settings):
    """Seen: the server took the first messages and went down; the claim was given back and
    the task's retry sent those deciders the same email again."""
    refund, task, notify, _, _ = kind
    add_second_admin(site)
    settings.EMAIL_BACKEND = DOWN_PART_WAY
    settings.MAIL_TAKEN_BEFORE_OUTAGE = 1
    DownPartWayBackend.taken = 0

    with pytest.raises(Retry):
        task.apply(args=[refund.pk])
    settings.MAIL_TAKEN_BEFORE_OUTAGE = 2  # the retry: one more, then down again
    with pytest.raises(Retry):
        task.apply(args=[refund.pk])

    assert messages_to() == dict.fromkeys(THREE_DECIDERS[:2], 1)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert task.apply(args=[refund.pk]).successful()
    assert messages_to() == dict.fromkeys(THREE_DECIDERS, 1)
    assert notify(refund_id=refund.pk) is False  # told
    assert len(mail.outbox) == 3
