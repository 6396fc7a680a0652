"""When a purchase's charge first needs attention, the site's owners and admins each get one
email of their own (the people told of a refund that needs attention, active accounts only):
what happened, the order, the amount, the idempotency key to look for in the rail's dashboard
and the link to the order page. An owner is asked to record what it shows there; an admin,
who cannot, to ask an owner to. A send that fails is retried; the beat sweep sends one the
on-commit task missed."""

from __future__ import annotations

import socket

import pytest
from django.core import mail
from django.test import override_settings

from refunds.review.notifications import DECIDERS
from sill.accounts.models import Role
from sill.accounts.notices import member_emails
from sill.accounts.services import add_member
from sill.orders.charge_attention import notify_charge_attention
from sill.orders.charging import charge_order
from sill.orders.models import Charge, ChargeStatus, Order
from sill.orders.tasks import recover_stuck_charges_task
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(make_order, agent, members, settings) -> Order:
    settings.SILL_BASE_URL = "https://sill.example"
    return make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )


@pytest.fixture
def told(order, django_capture_on_commit_callbacks) -> Charge:
    """A charge flagged as the worker flags it, its on-commit task run."""
    with django_capture_on_commit_callbacks(execute=True):
        return charge_in_doubt(order)


@pytest.fixture
def missed(order) -> Charge:
    """A charge flagged whose on-commit task never ran (its message was lost)."""
    return charge_in_doubt(order)


def notified(charge: Charge) -> bool:
    return Charge.objects.filter(pk=charge.pk, attention_notified_at__isnull=False).exists()


def test_the_owners_and_admins_get_one_email_each_when_a_charge_first_needs_attention(order, told):
    # Not reviewers, staff, nor another site's owner; each their own message.
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    for message in mail.outbox:
        assert (
            message.subject == f"[Sill] Needs attention: a $89.00 charge for order #{order.number}"
        )
        body = message.body
        assert "A charge on Test Roasters needs attention" in body
        assert "Mock may have charged the buyer" in body
        assert f"Order: #{order.number} (Buyer, buyer@example.com)" in body
        assert "Amount: $89.00 on Mock" in body
        assert f"What happened: {told.attention_reason}" in body
        assert f"idempotency key sill-charge-{order.pk}" in body
        assert "not cancelled" in body
        assert f"https://sill.example/orders/{order.pk}/#charge-{told.pk}\n" in body
    assert notified(told)


def test_an_owner_is_asked_to_record_the_answer_and_an_admin_to_ask_an_owner(order, told):
    # Seen: both were told to "record it on the order page", which only an owner may do
    # (resolve_charge_attention); an admin opening the page found no form.
    by_role = {m.to[0].split("@")[0]: m.body for m in mail.outbox}
    owner, admin = by_role["owner"], by_role["admin"]
    assert (
        f"If you can see the answer in Mock's dashboard (look for idempotency key "
        f"sill-charge-{order.pk}), record it on the order page:\n"
    ) in owner
    assert "Only an owner" not in owner and "ask an owner" not in owner
    assert (
        "Only an owner can record the answer. If you can see it in Mock's dashboard (look for "
        f"idempotency key sill-charge-{order.pk}), ask an owner to record it on the order page:\n"
    ) in admin
    assert ", record it on the order page" not in admin


def test_it_goes_to_the_same_people_as_a_refund_that_needs_attention(
    order, members, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        charge_in_doubt(order)
    assert sorted(m.to[0] for m in mail.outbox) == member_emails(order.site_id, roles=DECIDERS)


def test_a_deactivated_owner_or_admin_is_not_told(order, members, missed):
    gone = add_member(
        site=order.site, email="former-admin@roasters.example", role=Role.ADMIN, password="x"
    )
    for user in (members["owner"].user, gone.user):
        user.is_active = False
        user.save()
    assert notify_charge_attention(charge_id=missed.pk) is True
    [message] = mail.outbox
    assert message.to == ["admin@roasters.example"]
    assert "ask an owner to record it" in message.body


def test_a_second_flag_sends_nothing_more(order, told, django_capture_on_commit_callbacks):
    # The sweep's lookup finds the rail still switched off: flagged again, told already.
    with (
        override_settings(SILL_CHARGE_MAX_ATTEMPTS=1),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert charge_order(order_id=order.pk) == "needs_attention"
    assert len(mail.outbox) == 2  # the owner's and the admin's
    assert notify_charge_attention(charge_id=told.pk) is False
    assert recover_stuck_charges_task.apply().get() == 0
    assert len(mail.outbox) == 2


def test_an_email_that_fails_is_sent_by_the_next_attempt(missed, settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once the socket closes
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    with pytest.raises(OSError):
        notify_charge_attention(charge_id=missed.pk)
    assert not notified(missed)  # the claim was given back
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notify_charge_attention(charge_id=missed.pk) is True
    assert len(mail.outbox) == 2 and notified(missed)


def test_the_sweep_sends_one_the_on_commit_task_missed(order, missed):
    assert mail.outbox == []
    recover_stuck_charges_task.apply().get()
    assert len(mail.outbox) == 2 and notified(missed)
    assert all(f"sill-charge-{order.pk}" in m.body for m in mail.outbox)
    recover_stuck_charges_task.apply().get()
    assert len(mail.outbox) == 2


def test_a_charge_settled_before_the_email_went_is_not_told(missed):
    Charge.objects.filter(pk=missed.pk).update(status=ChargeStatus.FAILED)
    assert notify_charge_attention(charge_id=missed.pk) is False
    recover_stuck_charges_task.apply().get()
    assert mail.outbox == []
