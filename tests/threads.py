"""Run work in real concurrent threads, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def run_concurrently(n: int, work: Callable[[int], object]) -> list[object]:
    """Start ``n`` threads together (a barrier), run ``work(i)`` in each, return the results.

    An exception is returned in place of a result, so the test can look at every outcome.
    Each thread closes its own connection: Django opens one per thread.
    """
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except Exception as exc:  # examined by the caller
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results
