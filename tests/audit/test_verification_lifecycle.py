"""Activity's background "Verify chain": one at a time per site, and never running forever."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditVerification
from audit.verification import (
    LOST,
    STALE_AFTER,
    latest_verification,
    run_verification,
    start_verification,
)
from sill.accounts.models import Site
from tests.broker_down import broker_unreachable


class _Nobody:
    pk = None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_requests_at_once_start_one_check(site: Site) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks")
    errors: list[BaseException] = []
    done = threading.Event()

    def second() -> None:
        try:
            start_verification(site=site, actor=_Nobody())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()
            connection.close()

    with transaction.atomic():
        start_verification(site=site, actor=_Nobody())  # not committed yet
        thread = threading.Thread(target=second)
        thread.start()
        done.wait(timeout=2)  # with the site locked, the second waits for this one
    thread.join(timeout=30)
    assert not errors, errors
    assert AuditVerification.objects.filter(site=site).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_check_ended_as_lost_while_it_ran_keeps_that_end(site: Site) -> None:
    """A check silent for STALE_AFTER is ended as failed ("its worker stopped") when a new one
    is asked for; if its worker was only slow, its progress and result used to overwrite that
    end: the row said running again, then ok, beside the check that replaced it."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks")
    # As start_verification records it (which, eager in tests, would also run it at once).
    check = AuditVerification.objects.create(site=site, total=0, started_at=timezone.now())
    outcome: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            outcome.append(run_verification(check.pk))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        # Ended as lost, not yet committed: the worker's first write waits for this row.
        AuditVerification.objects.filter(pk=check.pk).update(
            status=AuditVerification.Status.FAILED, problem=LOST, finished_at=timezone.now()
        )
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(timeout=1)
    thread.join(timeout=30)
    assert not errors, errors
    check.refresh_from_db()
    assert (check.status, check.problem) == (AuditVerification.Status.FAILED, LOST)
    assert outcome == ["ended as lost"]


@pytest.mark.django_db
def test_a_check_whose_worker_died_ends_failed_instead_of_running(client_for, site) -> None:
    lost = AuditVerification.objects.create(
        site=site, total=5, started_at=timezone.now() - STALE_AFTER - timedelta(seconds=1)
    )
    assert latest_verification(site).status == AuditVerification.Status.FAILED
    part = client_for("owner").get("/activity/", {"part": "verification"}).content.decode()
    assert "Verifying the chain" not in part and "every 2s" not in part
    # The check said nothing about the chain: not "broken", which a member would take for
    # tampering.
    assert "Not verified" in part and "its worker stopped" in part
    assert "Chain broken" not in part
    lost.refresh_from_db()
    assert lost.status == AuditVerification.Status.RUNNING  # a GET writes nothing
    again = start_verification(site=site, actor=None)  # a new check ends it for good
    lost.refresh_from_db()
    assert again.pk != lost.pk
    assert lost.status == AuditVerification.Status.FAILED and lost.finished_at is not None


@pytest.mark.django_db
def test_a_long_check_still_making_progress_is_not_taken_for_lost(client_for, site) -> None:
    """A large log takes longer than STALE_AFTER to verify: a check started that long ago
    but still writing progress was shown as failed ("its worker stopped") and ended by the
    next request, which started a second check beside it."""
    long_ago = timezone.now() - STALE_AFTER * 3
    running = AuditVerification.objects.create(
        site=site,
        total=10_000_000,
        checked=6_000_000,
        started_at=long_ago,
        progress_at=timezone.now() - timedelta(seconds=2),
    )
    assert latest_verification(site).status == AuditVerification.Status.RUNNING
    again = start_verification(site=site, actor=None)
    running.refresh_from_db()
    assert again.pk == running.pk and running.status == AuditVerification.Status.RUNNING
    # Once it stops writing progress for STALE_AFTER, it is lost.
    AuditVerification.objects.filter(pk=running.pk).update(
        progress_at=timezone.now() - STALE_AFTER - timedelta(seconds=1)
    )
    assert latest_verification(site).status == AuditVerification.Status.FAILED
    assert start_verification(site=site, actor=None).pk != running.pk


def test_the_check_may_run_as_long_as_a_large_log_takes_and_is_never_delivered_twice() -> None:
    """The project's task limits (a few minutes: a hung rail call must end) cut a check of a
    log of a few million records short, so it always failed; and a task acknowledged late
    that runs past the broker's visibility timeout is delivered to a second worker."""
    from django.conf import settings

    from audit.tasks import verify_chain_task

    assert verify_chain_task.acks_late is False
    assert verify_chain_task.soft_time_limit >= 3600
    assert verify_chain_task.time_limit > verify_chain_task.soft_time_limit
    assert verify_chain_task.soft_time_limit > settings.CELERY_TASK_SOFT_TIME_LIMIT


@pytest.mark.django_db(transaction=True)
def test_a_check_the_broker_cannot_take_ends_at_once_not_verified(client_for, site) -> None:
    """The queue down when a member asks: the check ends failed "not started" at once (the
    page got a 500 after the commit, and a "running" check kept any other from starting for
    STALE_AFTER), and the next request starts a new one."""
    client = client_for("owner")
    # A transaction of the test's own would hold the commit back: here it happens where it
    # does in a request, before the answer is rendered.
    with broker_unreachable():
        answer = client.post("/activity/verify/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    part = answer.content.decode()
    assert "Not verified" in part and "could not be started" in part
    assert "Chain broken" not in part and "every 2s" not in part
    failed = AuditVerification.objects.get(site=site)
    assert failed.status == AuditVerification.Status.FAILED and failed.finished_at is not None

    client.post("/activity/verify/")  # tasks run eagerly again: checked at once
    again = AuditVerification.objects.exclude(pk=failed.pk).get(site=site)
    assert again.status == AuditVerification.Status.OK
