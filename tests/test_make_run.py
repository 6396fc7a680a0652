"""README's `make run`: on SQLite and the embedded broker, the demo loaded, a worker with beat
that executes the demo's refunds, and Ctrl-C or SIGTERM to its process group stops the server,
the worker and beat, leaving no process behind."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.worker import ROOT, wait_for

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
    pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="no .venv"),
]

# What `make run` is told by the environment of a fresh checkout: nothing of the tests'.
NOT_PASSED = ("DATABASE_URL", "REDIS_URL", "SILL_BROKER_URL", "SILL_BROKER_DIR", "SILL_TESTING",
              "SILL_CELERY_EAGER", "DEBUG", "SILL_DATA_DIR", "PORT")  # fmt: skip
HEARTBEAT_RAN = re.compile(r"Task sill\.heartbeat\[[^\]]+\] succeeded")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        found.setdefault(ppid, []).append(int(entry.name))
    return found


def _descendants(pid: int) -> set[int]:
    """Every process under ``pid``, whatever its process group or session."""
    children, found, todo = _children(), set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_make_run_serves_works_and_stops_whole(tmp_path: Path, sig: signal.Signals) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    env.update({"SILL_DATA_DIR": str(tmp_path / "var"), "PORT": str(port),
                "PYTHONUNBUFFERED": "1"})  # fmt: skip
    log_path = tmp_path / "make-run.log"
    with log_path.open("wb") as log:
        # -o: the test is about running, not installing (the .venv is the suite's own).
        make = subprocess.Popen(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "run"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as a terminal gives it
        )  # fmt: skip
    processes: set[int] = set()
    try:

        def serving() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(serving, timeout=180, what="make run's server")
        text = lambda: log_path.read_text(errors="replace")  # noqa: E731
        # The demo's two staff refunds are executed by the worker, from the embedded broker.
        wait_for(lambda: text().count("Task refunds.execute[") >= 4, timeout=60,
                 what="the worker executing the demo's refunds")  # fmt: skip
        assert "transport:   filesystem://" in text()
        assert "beat: Starting..." in text()
        assert f"Sill: http://127.0.0.1:{port}/" in text()
        assert "owner@northwind-coffee.example" in text()
        assert text().count("succeeded in") >= 2
        processes = {make.pid, *_descendants(make.pid)}
        assert len(processes) >= 5  # make, its shell, the server (twice), the worker and pool

        if sig == signal.SIGTERM:
            # Beat sends its every-minute tasks, and the worker runs them. (It is also the pool
            # gone idle for a while: a SIGTERM to the group then killed pool processes holding
            # the pool's lock, and the worker's main process waited for it for ever.)
            wait_for(lambda: "Scheduler: Sending due task" in text(), timeout=90,
                     what="beat sending its tasks")  # fmt: skip
            wait_for(lambda: HEARTBEAT_RAN.search(text()) is not None, timeout=30,
                     what="the worker running beat's heartbeat")  # fmt: skip
            time.sleep(5)
        os.killpg(make.pid, sig)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_alive, processes)):
            make.poll()
            time.sleep(0.2)
        left = sorted(p for p in processes if _alive(p))
        assert not left, f"still running 30 s after {sig.name}: " + "; ".join(
            Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ") for p in left
        )
    finally:
        for pid in processes | {make.pid, *_descendants(make.pid)}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        make.wait(timeout=30)
