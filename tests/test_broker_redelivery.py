"""A worker SIGKILLed mid-task, on each broker (README "Workers, brokers and redelivery").

The embedded broker (kombu's filesystem transport) deletes a message's file when a worker
fetches it, so a killed worker takes the message with it: nothing delivers it again, and the
beat sweep ``refunds.recover_stuck`` recovers the refund. Redis keeps the message unacked and
delivers it again once it is older than the visibility timeout. Each test sets its worker's
broker explicitly, so both run wherever a Redis is reachable (CI sets REDIS_URL).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from refunds.models import Refund
from refunds.tasks import recover_stuck_refunds_task
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds import conftest as refund_fixtures
from tests.refunds.conftest import post, refund_intent
from tests.worker import (
    ROOT,
    embedded_broker,
    publishing_to,
    reachable_redis_url,
    redis_broker,
    running_worker,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# The agent fixtures of tests/refunds/, used from here: a signed mandate and the mock rail.
signing_key = refund_fixtures.signing_key
agent_key = refund_fixtures.agent_key
sign = refund_fixtures.sign
mock_rail = refund_fixtures.mock_rail

ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"
# A short lease, so that a redelivered or re-enqueued execution can claim the refund soon
# after the kill; the sweep takes any lapsed one (no minimum age).
FAST_RECOVERY = {
    "SILL_EXECUTION_LEASE_SECONDS": "2",
    "SILL_RECOVER_AFTER_SECONDS": "0",
    "SILL_EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
}
VISIBILITY_TIMEOUT = 5


def _executions(log: Path) -> list[str]:
    """Ids of the ``refunds.execute`` tasks the worker received, in order."""
    return re.findall(r"refunds\.execute\[([0-9a-f-]+)\] received", log.read_text())


def _refund_killed_mid_rail_call(log: Path, sign, mock_rail, env: dict[str, str]) -> str:
    """An approved refund whose worker is SIGKILLed after the rail recorded it, before settling."""
    mock_rail.config = {"refund": "succeed", "delay_seconds": 3}  # answers 3 s after recording
    mock_rail.save()
    with running_worker(log, **env) as worker:
        asked = post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00"))))
        assert asked.status_code == 201, asked.json()
        wait_for(
            lambda: MockLedgerEntry.objects.filter(kind="refund").exists(),
            what="the rail to record the refund",
        )
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    mock_rail.config = {}
    mock_rail.save()
    refund = Refund.objects.get(pk=asked.json()["refund_id"])
    assert refund.status == "processing"  # the money moved; Sill was not told
    assert len(_executions(log)) == 1
    return refund.pk


def _assert_refunded_once(refund_id: str) -> None:
    refund = Refund.objects.get(pk=refund_id)
    assert refund.status == "succeeded"
    entry = MockLedgerEntry.objects.get(kind="refund")  # exactly one refund at the rail
    assert refund.provider_refund_id == entry.provider_id
    charge = Charge.objects.get(order=refund.order)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (5000, 0)


def test_it_does_not_redeliver_a_killed_workers_task_on_the_embedded_broker_the_sweep_recovers_it(
    tmp_path, sign, make_order, agent, mock_rail
):
    make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    folder = tmp_path / "broker"
    broker = embedded_broker(folder)
    env = {**broker.worker_env, **FAST_RECOVERY}
    with publishing_to(broker):
        refund_id = _refund_killed_mid_rail_call(tmp_path / "first.log", sign, mock_rail, env)
        # The message's file was deleted when the worker fetched it: it died with the worker.
        assert list(folder.glob("*.msg")) == []
        second_log = tmp_path / "second.log"
        with running_worker(second_log, **env):
            # Longer than the lease and than Redis's redelivery in the test below: nothing comes.
            time.sleep(VISIBILITY_TIMEOUT + 5)
            assert _executions(second_log) == []
            assert Refund.objects.get(pk=refund_id).status == "processing"

            recover_stuck_refunds_task.delay()  # what beat runs every minute
            wait_for(
                lambda: Refund.objects.get(pk=refund_id).status == "succeeded",
                timeout=60,
                what="the sweep to recover the refund",
            )
    first_task = _executions(tmp_path / "first.log")[0]
    assert _executions(second_log) not in ([], [first_task])  # a new task, from the sweep
    _assert_refunded_once(refund_id)


def test_it_redelivers_a_killed_workers_task_on_redis_after_the_visibility_timeout(
    tmp_path, sign, make_order, agent, mock_rail
):
    url = reachable_redis_url()
    if url is None:
        pytest.skip("no Redis: neither REDIS_URL nor 127.0.0.1:6379")
    import redis

    # Messages other tests' killed workers left unacked would be redelivered here too.
    redis.Redis.from_url(url).delete("unacked", "unacked_index")
    make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    broker = redis_broker(url, visibility_timeout=VISIBILITY_TIMEOUT)
    env = {**broker.worker_env, **FAST_RECOVERY}
    with publishing_to(broker):
        refund_id = _refund_killed_mid_rail_call(tmp_path / "first.log", sign, mock_rail, env)
        killed_at = time.monotonic()
        second_log = tmp_path / "second.log"
        with running_worker(second_log, **env):
            wait_for(
                lambda: Refund.objects.get(pk=refund_id).status == "succeeded",
                timeout=60,
                what="Redis to deliver the task again",
            )
        recovered_after = time.monotonic() - killed_at
    # The same message, delivered again (no sweep ran: the test worker runs no beat).
    assert _executions(second_log) == _executions(tmp_path / "first.log")
    assert "refunds.recover_stuck[" not in second_log.read_text()
    assert recovered_after < 30
    _assert_refunded_once(refund_id)


def _redis_broker_settings() -> dict[str, object]:
    """The settings a fresh process derives for a Redis broker from the defaults alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SILL_", "REDIS_URL"))}
    env.update({"SILL_TESTING": "1", "SILL_BROKER_URL": "redis://127.0.0.1:6379/15"})
    script = (
        "import json, sill.settings as s; print(json.dumps({'url': s.CELERY_BROKER_URL, "
        "'options': s.CELERY_BROKER_TRANSPORT_OPTIONS, 'hard': s.CELERY_TASK_TIME_LIMIT, "
        "'soft': s.CELERY_TASK_SOFT_TIME_LIMIT}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.django_db(transaction=False)
def test_it_keeps_the_visibility_timeout_above_the_longest_task_plus_its_longest_countdown():
    """Shorter, and Redis hands a running task, or a retry waiting for its countdown (held
    unacked by a worker until then), to a second worker."""
    from sill.celery import app

    app.loader.import_default_modules()
    longest_countdown = max(
        getattr(settings, "SILL_EXECUTION_BACKOFF_CAP_SECONDS", 300),
        getattr(settings, "SILL_CHARGE_BACKOFF_CAP_SECONDS", 300),
        *(
            getattr(task, "retry_backoff_max", 600)
            for task in app.tasks.values()
            if getattr(task, "retry_backoff", False)
        ),
    )
    derived = _redis_broker_settings()
    assert derived["url"] == "redis://127.0.0.1:6379/15"
    assert derived["soft"] < derived["hard"]
    assert derived["options"]["visibility_timeout"] > derived["hard"] + longest_countdown
    # kombu looks for expired messages on every tick, not on every tenth.
    assert derived["options"]["unacked_restore_throttle"] == 1
