"""A real Celery worker process for integration tests, on the test database and broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

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
