"""A refund waiting for its retry is the task's, not the recovery sweep's, until that retry is
overdue.

Seen before: a retry released the lease and stamped ``updated_at``, and the sweep took every
processing refund unleased and untouched for ``SILL_RECOVER_AFTER_SECONDS`` (60 s). So any
backoff longer than a minute or two was cut short by the sweep, which ran the refund again
beside the task's own retry, still due later: two chains of attempts on one refund, spending
its ``SILL_EXECUTION_MAX_ATTEMPTS`` twice as fast. Raising the backoff cap to ride out an
outage brought the refund to needs_attention sooner, not later.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from refunds.execution import RetryLater, execute_refund, stuck_refund_ids
from refunds.models import Refund

pytestmark = pytest.mark.django_db

SWEEP_AFTER = timedelta(seconds=60)  # SILL_RECOVER_AFTER_SECONDS


@pytest.fixture
def waiting(make_order, staff_refund, mock_rail, settings):
    """A refund whose attempt timed out at the rail, its retry scheduled minutes away."""
    settings.SILL_EXECUTION_BACKOFF_BASE_SECONDS = 600
    settings.SILL_EXECUTION_BACKOFF_CAP_SECONDS = 600
    mock_rail.config = {"refund": "timeout", "fail_times": 5}
    mock_rail.save()
    refund = staff_refund(make_order(total="40.00"))
    random.seed(18)  # the jitter: a countdown of several minutes, the same every run
    with pytest.raises(RetryLater) as caught:
        execute_refund(refund.id)
    refund.refresh_from_db()
    return refund, caught.value


def test_the_retry_time_is_stamped_on_the_refund(waiting):
    refund, retry = waiting
    countdown = retry.countdown  # what the task waits (refunds.tasks)
    assert countdown > SWEEP_AFTER.total_seconds() + 10
    assert refund.status == "processing" and refund.lease_until is None
    due = (refund.next_check_at - refund.updated_at).total_seconds()
    assert abs(due - countdown) < 1


def test_the_sweep_leaves_it_to_its_retry_until_the_retry_is_overdue(waiting):
    refund, _retry = waiting
    # Untouched for well over the sweep's minute, the retry still ahead: not the sweep's.
    with time_machine.travel(refund.updated_at + SWEEP_AFTER + timedelta(seconds=5)):
        assert stuck_refund_ids(older_than=SWEEP_AFTER) == []
    with time_machine.travel(refund.next_check_at + SWEEP_AFTER - timedelta(seconds=1)):
        assert stuck_refund_ids(older_than=SWEEP_AFTER) == []
    # The retry should have run a minute ago: its message was lost (a killed worker on the
    # embedded broker). The sweep recovers it.
    with time_machine.travel(refund.next_check_at + SWEEP_AFTER + timedelta(seconds=1)):
        assert stuck_refund_ids(older_than=SWEEP_AFTER) == [refund.id]


def test_a_refund_never_retried_is_still_the_sweeps_after_a_minute(make_order, staff_refund):
    refund = staff_refund(make_order(total="40.00"))  # enqueued, its task lost: no retry due
    assert Refund.objects.get(pk=refund.id).next_check_at is None
    with time_machine.travel(timezone.now() + SWEEP_AFTER + timedelta(seconds=1)):
        assert stuck_refund_ids(older_than=SWEEP_AFTER) == [refund.id]
