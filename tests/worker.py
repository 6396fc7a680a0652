"""A real Celery worker process for integration tests, on the test database and broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from celery import Task
from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

ROOT = Path(__file__).resolve().parent.parent


def test_database_url() -> str:
    """A DATABASE_URL that points a separate process at the database the tests use."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = quote(s.get("USER") or "", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = s.get("HOST") or "localhost"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{s['NAME']}"


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "SILL_DATA_DIR": str(settings.SILL_DATA_DIR),
            "SILL_TESTING": "1",
            "SILL_CELERY_EAGER": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    else:
        env["SILL_BROKER_DIR"] = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
    env.update(extra)
    return env


@contextmanager
def running_worker(log_path: Path, **extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``celery worker`` (solo pool) and stop it afterwards; purges stale messages first."""
    from sill.celery import app

    app.conf.task_always_eager = False
    app.control.purge()
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "sill", "worker", "--pool", "solo",
         "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=worker_env(**extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: b"ready." in log_path.read_bytes(), timeout=60, what="worker start")
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def wait_for(check: Callable[[], bool], *, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# --- The fault matrices: a worker killed mid-way, and a second one that recovers ------------

# Short leases (a refund's execution and a charge) and a sweep that takes any lapsed one, so a
# killed worker's work is recovered within seconds.
FAST_RECOVERY = {
    "SILL_EXECUTION_LEASE_SECONDS": "2",
    "SILL_CHARGE_LEASE_SECONDS": "2",
    "SILL_RECOVER_AFTER_SECONDS": "0",
}


@contextmanager
def worker_killed(
    log_path: Path, *, failpoint: str | None, rail_acted: Callable[[], bool], **extra_env: str
) -> Iterator[None]:
    """A worker (``FAST_RECOVERY``) that dies by SIGKILL running what the block enqueues: at
    ``failpoint`` (``name=kill``, armed in its environment only), or, with none, as soon as
    ``rail_acted()`` says the rail has acted: killed while it waits on a slow rail call that
    already moved the money. Returns once the worker is dead."""
    env = {**FAST_RECOVERY, **extra_env}
    if failpoint:
        env["SILL_FAILPOINTS"] = failpoint
    with running_worker(log_path, **env) as worker:
        yield
        if failpoint:
            assert worker.wait(timeout=60) == -signal.SIGKILL, f"{failpoint} was not reached"
        else:
            wait_for(rail_acted, what="the rail to act")
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)


def lease_lapsed(row: QuerySet[Any]) -> bool:
    """Whether the lease on the one ``row`` (a refund, a charge) is free to claim."""
    lease = row.values_list("lease_until", flat=True).get()
    return lease is None or lease < timezone.now()


def recovered(
    log_path: Path,
    *,
    lapsed: Callable[[], bool],
    sweep: Task[..., Any],
    done: Callable[[], bool],
    **extra_env: str,
) -> None:
    """A second worker (``FAST_RECOVERY``): once ``lapsed()`` (the dead worker's lease), the
    beat task ``sweep`` is sent, as beat would, and the worker runs it until ``done()``."""
    with running_worker(log_path, **{**FAST_RECOVERY, **extra_env}):
        wait_for(lapsed, timeout=10, what="the lease to lapse")
        sweep.delay()
        wait_for(done, timeout=60, what="recovery")


# --- A broker chosen by the test, not by the environment (tests/test_broker_redelivery.py) ---

# Used when REDIS_URL is unset but a Redis answers on the default port: a database of its own.
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/15"


@dataclass(frozen=True)
class Broker:
    """A broker for this process to publish to, and the environment a worker needs to consume."""

    url: str
    transport_options: dict[str, object]
    worker_env: dict[str, str]
    # CELERY_BROKER_TRANSPORT for it (None: kombu's transport for the URL's scheme).
    transport: str | None = None


def embedded_broker(folder: Path) -> Broker:
    """kombu's filesystem transport in ``folder``, whatever REDIS_URL says."""
    folder.mkdir(parents=True, exist_ok=True)
    return Broker(
        url="filesystem://localhost//",
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        },
        worker_env={"SILL_BROKER_URL": "filesystem://", "SILL_BROKER_DIR": str(folder)},
    )


def reachable_redis_url() -> str | None:
    """REDIS_URL when set (unreachable then fails the test, as it should in CI); else a Redis
    answering on 127.0.0.1:6379; else None."""
    import redis

    if settings.REDIS_URL:
        return settings.REDIS_URL
    try:
        redis.Redis.from_url(LOCAL_REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError:
        return None
    return LOCAL_REDIS_URL


def redis_broker(url: str, *, visibility_timeout: int) -> Broker:
    return Broker(
        url=url,
        transport_options={"visibility_timeout": visibility_timeout},
        worker_env={
            "SILL_BROKER_URL": url,
            "SILL_BROKER_VISIBILITY_TIMEOUT": str(visibility_timeout),
        },
        transport="sill.broker:Transport",  # what settings choose for a redis:// broker
    )


@contextmanager
def publishing_to(broker: Broker) -> Iterator[None]:
    """Point this process's Celery app at ``broker`` for a while: ``.delay()`` publishes there
    and ``running_worker`` purges there. Start workers with ``**broker.worker_env``."""
    from sill.celery import app

    saved = (app.conf.broker_url, app.conf.broker_transport_options, app.conf.broker_transport)

    def drop_connections() -> None:
        # The app caches its connection and producer pools for the broker it first used.
        app._pool = None
        app.amqp._producer_pool = None

    drop_connections()
    app.conf.broker_url, app.conf.broker_transport_options = broker.url, broker.transport_options
    app.conf.broker_transport = broker.transport
    try:
        yield
    finally:
        drop_connections()
        (app.conf.broker_url, app.conf.broker_transport_options, app.conf.broker_transport) = saved
