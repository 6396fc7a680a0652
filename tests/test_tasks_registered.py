"""Every task Sill enqueues by name is registered in a web process, as Django starts it.

``sill.queue.enqueue_on_commit`` looks a task up in Celery's registry when the transaction
commits; a task whose module no app's ``ready()`` imported is missing in a web process (a
worker imports every tasks module; a test process often has too), and the request that
enqueues it fails after its commit. Checked in a fresh interpreter, so that nothing this
test run imported hides a missing one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.worker import ROOT

# enqueue_on_commit("name", ...) and current_app.tasks["name"] in Sill's own code.
BY_NAME = re.compile(r'(?:enqueue_on_commit\(\s*|\.tasks\[)\s*"([a-z_]+\.[a-z_]+)"')


def names_enqueued_by_name() -> set[str]:
    names: set[str] = set()
    for package in ("sill", "refunds", "audit", "policies"):
        for folder, _dirs, files in os.walk(ROOT / package):
            for file in files:
                if file.endswith(".py"):
                    text = (ROOT / folder / file).read_text(encoding="utf-8")
                    names.update(BY_NAME.findall(text))
    return names


def test_every_task_enqueued_by_name_is_registered_in_a_web_process():
    names = names_enqueued_by_name()
    assert {"refunds.execute", "rails.process_stripe_event", "rails.learn_payment_account"} <= names
    script = (
        "import json, django; django.setup(); from celery import current_app; "
        "print(json.dumps(sorted(current_app.tasks.keys())))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sill.settings", "DEBUG": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    registered = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert names - registered == set()
