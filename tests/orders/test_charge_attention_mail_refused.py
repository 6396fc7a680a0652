"""A mail server that refuses one charge's attention email (an owner's address it no longer
accepts, or the message itself) keeps neither the other charges nor the other owners and
admins from being told. The refused charge stays untold and is tried again later, waiting
longer after each refusal; the log names the error's class and the charge, never an address
or the server's reply. A server that is down still ends the sweep's run, as before.

Seen: the sweep stopped at the first email error and always began with the oldest charge, so
one refused message kept every later charge's owners from hearing, every minute, for good."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from sill.orders.charge_attention import notify_missed_charge_attention
from sill.orders.models import Charge
from sill.orders.tasks import notify_charge_attention_task, recover_stuck_charges_task
from tests.failing_mail import (
    DECIDERS_TOLD,
    DOWN_PART_WAY,
    REFUSING_SOME,
    THREE_DECIDERS,
    DownPartWayBackend,
    RefusingBackend,
    add_second_admin,
    assert_nothing_secret_logged,
    sweeps_at,
    warnings_of,
)
from tests.failing_mail import PATH as DOWN
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db

LOGGER = "sill.orders.charge_attention"


@pytest.fixture
def in_doubt(make_order, agent, members):
    """``in_doubt(minutes_ago)``: a charge that needs attention since then, nobody told."""
    made = {"n": 0}

    def make(minutes_ago: int) -> Charge:
        made["n"] += 1
        order = make_order(
            status="PENDING",
            charged=False,
            placed_by_agent=agent,
            source_mandate_id=f"mnd_doubt_{made['n']}",
        )
        charge = charge_in_doubt(order)  # its on-commit email never ran: the sweep's to tell
        since = timezone.now() - timedelta(minutes=minutes_ago)
        Charge.objects.filter(pk=charge.pk).update(attention_since=since)
        return charge

    return make


def told(charge: Charge) -> bool:
    return Charge.objects.filter(pk=charge.pk, attention_notified_at__isnull=False).exists()


def warnings(caplog) -> list[str]:
    return warnings_of(caplog, LOGGER)


def test_a_refused_email_skips_its_charge_and_the_sweep_tells_the_others(
    in_doubt, settings, caplog
):
    oldest, later = in_doubt(60), in_doubt(5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = [f"for order #{oldest.order.number}"]

    with caplog.at_level(logging.WARNING):
        recover_stuck_charges_task.apply().get()

    assert told(later) and not told(oldest)
    assert sorted(m.to for m in mail.outbox) == DECIDERS_TOLD
    assert all(f"sill-charge-{later.order_id}" in m.body for m in mail.outbox)
    assert warnings(caplog) == [
        f"charge {oldest.pk}: attention email refused (SMTPDataError); tried again in 5 minutes"
    ]
    assert "mail is failing" not in caplog.text  # not an outage
    assert_nothing_secret_logged(caplog)


def test_a_refused_charge_is_tried_again_later_each_wait_longer_until_it_is_told(
    in_doubt, settings, caplog
):
    charge = in_doubt(60)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_SUBJECTS = [f"for order #{charge.order.number}"]
    sweep_at = sweeps_at(notify_missed_charge_attention, caplog=caplog, logger=LOGGER)

    refused = f"charge {charge.pk}: attention email refused (SMTPDataError); tried again in"
    assert sweep_at(0) == [f"{refused} 5 minutes"]
    assert sweep_at(1) == sweep_at(4.9) == []  # waiting: not tried
    assert sweep_at(5.1) == [f"{refused} 10 minutes"]
    assert sweep_at(10) == sweep_at(15) == []
    assert sweep_at(15.2) == [f"{refused} 20 minutes"]
    assert not told(charge) and mail.outbox == []

    settings.MAIL_REFUSED_SUBJECTS = []  # the server takes it now
    assert sweep_at(30) == []
    assert not told(charge)  # still waiting out the last refusal
    assert sweep_at(35.3) == []
    assert told(charge) and len(mail.outbox) == 2


def test_one_refused_address_does_not_keep_the_other_deciders_from_being_told(
    in_doubt, settings, caplog
):
    # Seen: one message went to every owner and admin, so a server refusing one of them
    # refused it for all.
    charge = in_doubt(5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = ["owner@roasters.example"]

    with caplog.at_level(logging.WARNING):
        recover_stuck_charges_task.apply().get()

    [message] = mail.outbox
    assert message.to == ["admin@roasters.example"]
    assert told(charge)  # the admin was told: not sent again to everyone every minute
    assert warnings(caplog) == [
        f"charge {charge.pk}: attention email refused for a recipient "
        "(SMTPRecipientsRefused); the others were told"
    ]
    assert_nothing_secret_logged(caplog)
    recover_stuck_charges_task.apply().get()
    assert len(mail.outbox) == 1


def test_a_refusal_of_every_recipient_leaves_the_on_commit_task_to_the_sweep(
    in_doubt, settings, caplog
):
    charge = in_doubt(5)
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = ["owner@roasters.example", "admin@roasters.example"]

    with caplog.at_level(logging.WARNING):
        result = notify_charge_attention_task.apply(args=[charge.pk])

    assert result.successful()  # not retried at once: the sweep tries again after the wait
    assert not told(charge) and mail.outbox == []
    assert warnings(caplog) == [
        f"charge {charge.pk}: attention email refused (SMTPRecipientsRefused); "
        "tried again in 5 minutes"
    ]
    assert_nothing_secret_logged(caplog)
    caplog.clear()
    settings.MAIL_REFUSED_ADDRESSES = []
    recover_stuck_charges_task.apply().get()
    assert not told(charge) and warnings(caplog) == []  # waiting


def test_a_mail_server_that_is_down_still_ends_the_run_and_nobody_waits_for_it(in_doubt, settings):
    first, second = in_doubt(60), in_doubt(5)
    settings.EMAIL_BACKEND = DOWN
    RefusingBackend.offered = 0

    recover_stuck_charges_task.apply().get()

    assert RefusingBackend.offered == 1  # the first message: the run ended there
    assert not told(first) and not told(second)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    recover_stuck_charges_task.apply().get()  # the next minute: no wait after an outage
    assert told(first) and told(second) and len(mail.outbox) == 4


def test_a_server_down_part_way_through_the_sweep_tells_each_decider_once_of_each_charge(
    in_doubt, site, settings
):
    """Seen: the server went down after the first decider's message of the second charge; its
    claim was given back and the next sweep sent that decider the same email again."""
    first, second = in_doubt(60), in_doubt(5)
    add_second_admin(site)
    settings.EMAIL_BACKEND = DOWN_PART_WAY
    settings.MAIL_TAKEN_BEFORE_OUTAGE = 4  # the first charge's three, one of the second's
    DownPartWayBackend.taken = 0

    recover_stuck_charges_task.apply().get()

    assert told(first) and not told(second)
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    recover_stuck_charges_task.apply().get()
    recover_stuck_charges_task.apply().get()
    assert told(second)
    sent = sorted((charge.pk, m.to[0]) for charge in (first, second) for m in mail.outbox
                  if f"#charge-{charge.pk}" in m.body)  # fmt: skip
    assert sent == sorted((c.pk, to) for c in (first, second) for to in THREE_DECIDERS)
    assert len(mail.outbox) == 6
