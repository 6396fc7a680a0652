"""PostgreSQL restarting, or a connection of Sill's killed (``pg_terminate_backend``), under
the processes that keep connections: a web server (``conn_max_age`` with
``CONN_HEALTH_CHECKS``), a Celery worker (in the middle of a refund, and between tasks) and
beat (README "A database that is down").

What these pin: the next request after its connection was killed is answered as usual, not a
500 (Django checks a kept connection before a request uses it); a refund whose worker lost its
connection after the rail refunded, before the settlement committed, is executed again with
the same idempotency key and settled once; the worker's next task and beat's next sends go on.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from refunds.models import Refund
from refunds.tasks import recover_stuck_refunds_task
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.conftest import site_owner
from tests.refunds import conftest as refund_fixtures
from tests.refunds.conftest import post, refund_intent
from tests.worker import ROOT, running_worker, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.worker]

signing_key = refund_fixtures.signing_key
agent_key = refund_fixtures.agent_key
sign = refund_fixtures.sign
mock_rail = refund_fixtures.mock_rail

ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"


def sessions_of_others() -> list[tuple[int, str]]:
    """(pid, state) of every other client session on the test database: the process under
    test's (this test's own connection left out)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return list(cursor.fetchall())


def terminate_others() -> int:
    """``pg_terminate_backend`` every other session on the test database (what a restart of
    PostgreSQL, a failover or an idle-connection reaper does to them); how many there were."""
    pids = [pid for pid, _ in sessions_of_others()]
    with connection.cursor() as cursor:
        for pid in pids:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    return len(pids)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_the_next_request_after_postgresql_ended_a_web_workers_connection_is_answered(
    agent, tmp_path
):
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    port = _free_port()
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "sill.wsgi", "--bind", f"127.0.0.1:{port}",
             "--workers", "1"],
            cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/api/v1/agent"

            def answers() -> bool:
                try:
                    return _get(url, token)[0] == 200
                except OSError:
                    return False

            wait_for(answers, timeout=60, what="gunicorn to answer")
            # The worker keeps its connection between requests (conn_max_age).
            [(_, state)] = sessions_of_others()
            assert state == "idle"
            assert terminate_others() == 1
            status, body = _get(url, token)
        finally:
            server.terminate()
            server.wait(timeout=20)
    assert status == 200, body
    assert b"Internal Server Error" not in log_path.read_bytes()


FAST_RETRY = {
    # The settlement's connection is killed while the failpoint holds the worker after the
    # rail call; the retry comes at once.
    "SILL_FAILPOINTS": "after_rail_call=sleep:3",
    "SILL_EXECUTION_BACKOFF_BASE_SECONDS": "0.2",
    "SILL_EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
}


def test_a_refund_whose_worker_lost_its_connection_before_settling_is_settled_once(
    tmp_path, sign, make_order, agent, mock_rail
):
    make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    log = tmp_path / "worker.log"
    with running_worker(log, **FAST_RETRY):
        asked = post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00"))))
        assert asked.status_code == 201, asked.json()
        refund_id = asked.json()["refund_id"]
        wait_for(
            lambda: MockLedgerEntry.objects.filter(kind="refund").exists(),
            what="the rail to record the refund",
        )
        # The money moved; the worker, between the rail's answer and the settlement, has its
        # one connection idle. PostgreSQL restarts (or an operator kills the session) now.
        wait_for(lambda: [s for _, s in sessions_of_others()] == ["idle"], what="an idle worker")
        assert terminate_others() == 1
        wait_for(
            lambda: Refund.objects.get(pk=refund_id).status != "processing",
            timeout=60,
            what="the refund to be settled",
        )
        # Between tasks: PostgreSQL ends whatever the worker kept, and the next task runs.
        terminate_others()
        recover_stuck_refunds_task.delay()  # what beat sends every minute
        wait_for(lambda: "refunds.recover_stuck[" in log.read_text() and bool(
            re.search(r"refunds\.recover_stuck\[[0-9a-f-]+\] succeeded", log.read_text())
        ), what="the next task")  # fmt: skip
    text = log.read_text()
    # The settlement failed on the lost connection and was retried, not failed or dropped.
    assert "but Sill could not record it: OperationalError" in text
    refund = Refund.objects.get(pk=refund_id)
    assert (refund.status, refund.attempts) == ("succeeded", 2)
    entry = MockLedgerEntry.objects.get(kind="refund")  # one refund at the rail: one key
    assert refund.provider_refund_id == entry.provider_id
    charge = Charge.objects.get(order=refund.order)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (5000, 0)


def _sends(log: Path) -> int:
    return log.read_text().count("Sending due task probe (refunds.recover_stuck)")


def test_beat_goes_on_sending_after_postgresql_ended_its_connection(tmp_path):
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
    PeriodicTask.objects.create(name="probe", task="refunds.recover_stuck", interval=every_second)
    log = tmp_path / "beat.log"
    with log.open("wb") as out:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "sill", "beat", "-S", "django",
             "--loglevel", "INFO", "--max-interval", "1"],
            cwd=ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(lambda: _sends(log) >= 2, timeout=60, what="beat to send")
            assert terminate_others() == 1  # the scheduler's connection
            sent = _sends(log)
            wait_for(lambda: _sends(log) >= sent + 3, timeout=20, what="beat to go on")
            # And it reads the schedule again: a change made now is seen.
            probe = PeriodicTask.objects.get(name="probe")
            probe.enabled = False
            probe.save()  # marks the schedule changed (PeriodicTasks), as the admin does
            wait_for(
                lambda: "DatabaseScheduler: Schedule changed." in log.read_text(),
                timeout=20,
                what="beat to read the changed schedule",
            )
        finally:
            beat.terminate()
            beat.wait(timeout=20)
    assert "Traceback" not in log.read_text()
