"""A round trip through a real Celery worker process on the configured broker and database."""

from __future__ import annotations

import pytest

from sill.accounts.models import WorkerHeartbeat
from sill.accounts.tasks import record_heartbeat_task
from tests.worker import running_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_it_runs_a_task_in_a_real_worker(tmp_path):
    with running_worker(tmp_path / "worker.log"):
        record_heartbeat_task.delay("roundtrip-probe")
        wait_for(
            lambda: WorkerHeartbeat.objects.filter(hostname="roundtrip-probe").exists(),
            timeout=30,
            what="the worker to record the heartbeat",
        )
    log = (tmp_path / "worker.log").read_text()
    assert "sill.heartbeat" in log and "succeeded" in log


def test_it_enqueues_only_after_commit(tmp_path, django_capture_on_commit_callbacks):
    from django.db import transaction

    with running_worker(tmp_path / "worker.log"):
        with transaction.atomic():
            record_heartbeat_task.delay_on_commit("after-commit-probe")
            transaction.set_rollback(True)
        record_heartbeat_task.delay("sentinel-probe")
        wait_for(
            lambda: WorkerHeartbeat.objects.filter(hostname="sentinel-probe").exists(),
            what="the sentinel",
        )
    assert not WorkerHeartbeat.objects.filter(hostname="after-commit-probe").exists()
