"""The WSGI entry point loads the application with its URLconf, then freezes what it loaded
out of the garbage collector's sight (``sill/wsgi.py``), and a Celery worker does the same
before it forks its pool (``sill/celery.py``): a full collection in a web worker
walked every module, class and function of Django and Sill, 60-90 ms each time (longer with
several workers on shared cores), and those pauses were the slowest decisions' latency
(bench/agent_http.py). Run in a fresh interpreter: freezing is for the process that serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, json, sys
import sill.wsgi
from django.conf import settings
print(json.dumps({
    "urlconf": settings.ROOT_URLCONF in sys.modules,
    "views": "refunds.agent.api" in sys.modules,
    "frozen": gc.get_freeze_count(),
    "tracked": len(gc.get_objects()),  # what a full collection walks now
}))
"""


def test_the_wsgi_application_loads_its_urlconf_and_freezes_what_it_loaded() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sill.settings", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["urlconf"] and seen["views"]  # loaded before the first request, not by it
    # Everything loaded is frozen; a full collection walks only what was made since.
    assert seen["frozen"] > 50_000
    assert seen["tracked"] < seen["frozen"] / 20


CELERY_PROBE = """
import gc, json, sys
import django
django.setup()
from celery import signals
from sill.celery import app, freeze_loaded
app.loader.import_default_modules()  # what the worker imports before worker_init
before = gc.get_freeze_count()
signals.worker_init.send(sender=None)
print(json.dumps({
    "connected": any(r() is freeze_loaded for _, r in signals.worker_init.receivers),
    "tasks": "refunds.tasks" in sys.modules,
    "before": before,
    "frozen": gc.get_freeze_count(),
    "tracked": len(gc.get_objects()),
}))
"""


def test_a_celery_worker_freezes_what_it_loaded_before_forking_its_pool() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sill.settings", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CELERY_PROBE], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["connected"] and seen["tasks"]
    assert seen["before"] == 0 and seen["frozen"] > 50_000
    assert seen["tracked"] < seen["frozen"] / 20
