"""Activity's background "Verify chain": one at a time per site, and never running forever."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditVerification
from audit.verification import STALE_AFTER, latest_verification, start_verification
from sill.accounts.models import Site


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


@pytest.mark.django_db
def test_a_check_whose_worker_died_ends_failed_instead_of_running(client_for, site) -> None:
    lost = AuditVerification.objects.create(
        site=site, total=5, started_at=timezone.now() - STALE_AFTER - timedelta(seconds=1)
    )
    assert latest_verification(site).status == AuditVerification.Status.FAILED
    part = client_for("owner").get("/activity/", {"part": "verification"}).content.decode()
    assert "Verifying the chain" not in part and "every 2s" not in part
    assert "Chain broken" in part
    lost.refresh_from_db()
    assert lost.status == AuditVerification.Status.RUNNING  # a GET writes nothing
    again = start_verification(site=site, actor=None)  # a new check ends it for good
    lost.refresh_from_db()
    assert again.pk != lost.pk
    assert lost.status == AuditVerification.Status.FAILED and lost.finished_at is not None
