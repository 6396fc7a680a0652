"""The 24-hour expiry, with time travel: by the beat task, and at decision time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django_celery_beat.models import PeriodicTask

from audit.models import AuditRecord
from refunds.review.decisions import DecisionRefused, approve_refund, reject_refund
from refunds.tasks import expire_held_refunds_task
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


def expiry_records() -> list[dict]:
    return [
        json.loads(r.payload)["body"] for r in AuditRecord.objects.filter(kind="escalated_rejected")
    ]


def run_beat_task() -> int:
    return expire_held_refunds_task.apply().get()


def test_the_expiry_task_is_scheduled_every_minute():
    task = PeriodicTask.objects.get(task="refunds.expire_held")
    assert task.enabled and (task.interval.every, task.interval.period) == (1, "minutes")
    sweep = PeriodicTask.objects.get(task="refunds.notify_pending_held")
    assert sweep.enabled and (sweep.interval.every, sweep.interval.period) == (1, "minutes")


def test_the_beat_task_expires_a_refund_24_hours_after_it_was_held(held, time_machine):
    time_machine.move_to(held.expires_at - timedelta(seconds=30), tick=False)
    assert run_beat_task() == 0
    held.refresh_from_db()
    assert held.status == "held"

    time_machine.move_to(held.expires_at + timedelta(seconds=30), tick=False)
    assert run_beat_task() == 1
    held.refresh_from_db()
    assert (held.status, held.decision, held.outcome_code) == ("expired", "rejected", "expired")
    assert held.decided_by is None
    [record] = expiry_records()
    assert record["reason"] == "expired" and record["reviewer"] is None
    assert record["decision"] == "escalated_rejected"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    # Run again: nothing left to expire, no second record.
    assert run_beat_task() == 0
    assert len(expiry_records()) == 1


def test_the_beat_task_leaves_decided_and_fresh_refunds_alone(
    held, members, make_order, agent, time_machine, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)
    time_machine.move_to(held.expires_at + timedelta(hours=1), tick=False)
    fresh = hold_refund(order=make_order(), agent=agent)  # held just now
    assert run_beat_task() == 0
    held.refresh_from_db()
    fresh.refresh_from_db()
    assert (held.status, fresh.status) == ("succeeded", "held")
    assert not AuditRecord.objects.filter(kind="escalated_rejected").exists()


def test_an_approval_after_expiry_is_refused_and_expires_it(held, members, time_machine):
    time_machine.move_to(held.expires_at + timedelta(minutes=5), tick=False)
    with pytest.raises(DecisionRefused) as info:
        approve_refund(refund=held, actor=members["admin"].user)
    assert info.value.code == "expired" and info.value.status == 409
    assert "expired" in info.value.message and "Nothing was refunded" in info.value.message
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("expired", "expired")
    [record] = expiry_records()
    assert record["reason"] == "expired"
    assert record["reviewer"] is None and record["acted_by"] == "admin@roasters.example"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    assert Charge.objects.get(pk=held.charge_id).amount_reserved_minor == 0
    # The beat task finds nothing more to do.
    assert run_beat_task() == 0


def test_an_approval_one_second_before_expiry_goes_through(
    held, members, time_machine, django_capture_on_commit_callbacks
):
    time_machine.move_to(held.expires_at - timedelta(seconds=1), tick=False)
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)
    held.refresh_from_db()
    assert held.status == "succeeded"


def test_a_rejection_after_expiry_records_the_expiry(held, members, time_machine):
    time_machine.move_to(held.expires_at, tick=False)
    with pytest.raises(DecisionRefused) as info:
        reject_refund(refund=held, actor=members["owner"].user)
    assert info.value.code == "expired"
    held.refresh_from_db()
    assert held.status == "expired"
    assert [r["reason"] for r in expiry_records()] == ["expired"]


def test_a_refund_held_long_ago_expires_on_the_next_run(original, agent):
    from django.utils import timezone

    old = hold_refund(order=original, agent=agent, held_at=timezone.now() - timedelta(hours=25))
    assert run_beat_task() == 1
    old.refresh_from_db()
    assert old.status == "expired"


def test_an_overdue_hold_is_not_offered_for_confirmation(client_for, held, time_machine):
    """Past its 24 hours but before the sweep: approving it asked "Approve and refund …? This
    cannot be undone." though nothing could move. It goes to the decision, which expires it."""
    time_machine.move_to(held.expires_at + timedelta(minutes=2), tick=False)
    answer = client_for("admin").post(f"/held/{held.id}/approve/", {}, follow=True)
    body = answer.content.decode()
    assert "Approve and refund" not in body
    assert "This refund expired at" in body and "Nothing was refunded." in body
    held.refresh_from_db()
    assert held.status == "expired"
