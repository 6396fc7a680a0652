"""An SMTP outage does not fail the charge sweep (``orders.recover_stuck``): the rail is still
asked about the charges due, the charges whose owners could not be told stay untold so the
next run tells them, and a warning says mail is failing, naming no secret. As
``refunds.check_attention`` does for refunds."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from sill.orders.models import Charge, ChargeStatus, OrderStatus
from sill.orders.tasks import recover_stuck_charges_task
from sill.rails.registry import ensure_mock_rail
from tests.failing_mail import PATH as REFUSING_BACKEND
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db

PASSWORD = "smtp-pass-0f9c2e"


def _in_doubt(make_order, agent, mandate: str) -> Charge:
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id=mandate
    )
    return charge_in_doubt(order)  # its on-commit email never ran: the sweep's to tell


def test_the_sweep_still_asks_the_rail_while_mail_is_failing(
    make_order, agent, members, site, settings, caplog
):
    untold = _in_doubt(make_order, agent, "mnd_untold")
    due = _in_doubt(make_order, agent, "mnd_due")
    # The rail is back, and the second charge's check is due: the sweep's lookup settles it.
    account = ensure_mock_rail(site)
    account.enabled = True
    account.save()
    past = timezone.now() - timedelta(minutes=10)
    Charge.objects.filter(pk=due.pk).update(created_at=past, next_check_at=past)
    Charge.objects.filter(pk=untold.pk).update(next_check_at=timezone.now() + timedelta(hours=1))
    settings.EMAIL_BACKEND = REFUSING_BACKEND
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "sill", PASSWORD

    with caplog.at_level(logging.WARNING, logger="sill.orders.tasks"):
        assert recover_stuck_charges_task.apply().get() == 1

    due.refresh_from_db()
    assert due.status == ChargeStatus.SUCCEEDED and due.order.status == OrderStatus.PAID
    untold.refresh_from_db()
    assert untold.status == ChargeStatus.PENDING and untold.attention_notified_at is None
    [warning] = [r for r in caplog.records if r.name == "sill.orders.tasks"]
    assert warning.levelno == logging.WARNING
    assert "charge attention emails not sent: mail is failing" in warning.getMessage()
    assert PASSWORD not in caplog.text and "owner@roasters.example" not in caplog.text

    # Mail is back: the next run tells the owners of the charge it could not tell.
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    recover_stuck_charges_task.apply().get()
    assert len(mail.outbox) == 2  # the owner's and the admin's
    assert all(f"sill-charge-{untold.order_id}" in m.body for m in mail.outbox)
    untold.refresh_from_db()
    assert untold.attention_notified_at is not None
