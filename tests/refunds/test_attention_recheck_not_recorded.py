"""The beat's recheck of a refund that needs attention, when the rail answers and Sill cannot
record the answer (a lock timeout on the charge, here a real one): the task ends with one
line naming the refund and its site, and the refund stays as it was for the next sweep.

Seen before: recording the rail's answer failed into the execution task's retry path, which
gave the lease back and raised ``RetryLater`` out of ``refunds.check_at_rail`` (a task error
in the worker's log, naming neither the site nor what to expect), or, from ``fail_refund``,
the database's error itself, the lease held until it lapsed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.utils import timezone

from refunds.models import Refund
from refunds.reconcile.attention import attention_refund_ids_due
from refunds.tasks import check_refund_at_rail_task
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.threads import row_locked_elsewhere

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LOGGER = "refunds.reconcile.attention"


@contextmanager
def charge_locked_elsewhere(charge_id: int) -> Iterator[None]:
    """Another connection holds the charge's row lock, and this one waits at most 200 ms for a
    lock: recording on the charge fails with a real lock timeout."""
    with row_locked_elsewhere(Charge, charge_id):
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            (kept,) = cursor.fetchone()
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, false)", [kept])


@pytest.mark.parametrize(
    ("script", "answered"),
    [("timeout_after_effect", "succeeded"), ("timeout", "failed")],
    ids=["the-rail-made-it", "the-rail-has-none"],
)
def test_an_answer_sill_cannot_record_is_logged_and_left_for_the_next_sweep(
    make_order, mock_rail, staff_refund, settings, caplog, script, answered
):
    order = make_order(total="30.00")
    mock_rail.config = {"refund": script, "fail_times": 1}
    mock_rail.save()
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1  # the timeout leaves it in doubt at once
    refund = staff_refund(order)  # executed on commit (a transactional test)
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 8  # retries left: the path that raised
    before = Refund.objects.get(pk=refund.pk)
    assert before.status == "needs_attention"

    with caplog.at_level(logging.INFO, logger=LOGGER), charge_locked_elsewhere(before.charge_id):
        assert check_refund_at_rail_task(refund.id) == "unknown"

    after = Refund.objects.get(pk=refund.pk)
    assert (after.status, after.outcome_code, after.failure_message) == (
        before.status, before.outcome_code, before.failure_message,
    )  # fmt: skip
    assert after.lease_until is None and after.next_check_at > timezone.now()
    charge = Charge.objects.get(pk=before.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 3000)
    [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert line.startswith(f"refund {refund.id} of site {refund.site_id}: ")
    assert "could not be recorded" in line and "asked again" in line

    # The next sweep, once due, asks again and records the answer.
    Refund.objects.filter(pk=refund.pk).update(next_check_at=timezone.now())
    assert refund.id in attention_refund_ids_due()
    assert check_refund_at_rail_task(refund.id) == answered
    assert Refund.objects.get(pk=refund.pk).status == answered
    made = 1 if answered == "succeeded" else 0
    assert MockLedgerEntry.objects.filter(kind="refund").count() == made
