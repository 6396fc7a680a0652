"""Failpoints: named places on the money path where a fault test makes this process die.

Integration tests start a real worker with ``SILL_FAILPOINTS=after_rail_call=kill`` (several
``name=action`` pairs, comma-separated) to SIGKILL it at an exact step, the way a crash, an
OOM kill or a deploy would. Actions: ``kill`` (SIGKILL this process) and ``sleep:<seconds>``.
They are honoured only when ``SILL_TESTING=1`` as well, so a production environment variable
alone can never arm one. Unarmed, a failpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time


def _armed() -> dict[str, str]:
    if os.environ.get("SILL_TESTING") != "1":
        return {}
    points: dict[str, str] = {}
    for pair in os.environ.get("SILL_FAILPOINTS", "").split(","):
        name, _, action = pair.strip().partition("=")
        if name and action:
            points[name] = action
    return points


_ARMED = _armed()


def failpoint(name: str) -> None:
    """Fire the failpoint ``name`` if a test armed it in this process's environment."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith("sleep:"):
        time.sleep(float(action.removeprefix("sleep:")))
