"""Independent rail reads at once, each bounded in time: what a refund decision waits for.

A decision reads facts from the rail inside the web request (policies.facts). Where a
provider needs several independent calls (Stripe: the charge, the customer, the customer's
history), :func:`read_at_once` starts them together on a small pool of threads shared by the
process and waits at most ``timeout`` seconds for all of them. A read that fails or has not
answered by then gives ``None``: its facts are unknown, and rules treat an unknown fact
restrictively (hold or deny), so a slow provider never lets money out. A read still running
after the deadline is abandoned, not interrupted: the rail's own HTTP timeout (set to the
same value) ends it soon after, and nothing waits for its answer.

The reads must not use the database (pool threads have no request transaction).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

logger = logging.getLogger(__name__)

MAX_THREADS = 8

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    # One pool per process, made at first use: a forked Celery or gunicorn worker has no
    # threads of its parent's pool, so it makes its own.
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="sill-rail"))
        return _pool[1]


def read_at_once(
    reads: dict[str, Callable[[], Any]], *, timeout: float, rail: str
) -> dict[str, Any]:
    """Run ``reads`` concurrently; each name maps to its result, or ``None`` when the read
    raised or took longer than ``timeout`` seconds (logged, without the exception's text,
    which could quote a request)."""
    pool = _executor()
    futures: dict[str, Future[Any]] = {name: pool.submit(read) for name, read in reads.items()}
    wait(futures.values(), timeout=timeout)
    results: dict[str, Any] = {}
    for name, future in futures.items():
        if not future.done():
            future.cancel()
            logger.warning("%s %s: no answer within %.1f s, left unknown", rail, name, timeout)
            results[name] = None
            continue
        error = future.exception()
        if error is not None:
            logger.warning(
                "%s %s could not be read (%s), left unknown", rail, name, type(error).__name__
            )
            results[name] = None
            continue
        results[name] = future.result()
    return results
