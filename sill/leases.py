"""Keeping an execution's lease while it waits on a slow rail call.

Refund executions (``refunds.execution``) and charges (``sill.orders.charging``) hold a lease
on their row, fenced by a token, while they call the rail. A rail may take longer to answer
than the lease lasts (a Stripe call may wait up to its 20 s timeout, and a lease can be set
shorter): the recovery sweep would then take over an execution that is alive, and spend one of
its attempts asking the rail about a call still in flight. The holder renews the lease while
it waits instead; a renewal refused (the token no longer holds the lease) ends the renewing,
and the holder's own writes, which check the token, are refused too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import Error, connection

logger = logging.getLogger(__name__)


@contextmanager
def lease_kept(
    renew: Callable[[], bool], *, seconds: float, name: str
) -> Iterator[threading.Event]:
    """Call ``renew`` every third of ``seconds`` (the lease's length) while the block runs.

    ``renew`` extends the lease and says whether the caller's token still held it. Yields an
    event that is set once it did not: the lease was taken over meanwhile. The renewing thread
    (named ``name``) has its own database connection and closes it.
    """
    stop = threading.Event()
    lost = threading.Event()

    def keep() -> None:
        try:
            while not stop.wait(max(seconds / 3, 0.5)):
                try:
                    renewed = renew()
                except Error as error:
                    # A connection lost (a restarted or failed-over database, a killed
                    # backend) must not end the renewing: this lease would then lapse under
                    # a call still in flight, and the sweep spend an attempt on it. The next
                    # renewal opens a new connection; while none works the lease lapses as if
                    # this process had stopped, and the holder's fenced writes are refused.
                    logger.warning(
                        "%s: renewing the lease failed (%s); trying again",
                        name,
                        type(error).__name__,
                    )
                    connection.close()
                    continue
                if not renewed:
                    lost.set()
                    return
        finally:
            connection.close()

    thread = threading.Thread(target=keep, name=name, daemon=True)
    thread.start()
    try:
        yield lost
    finally:
        stop.set()
        thread.join()
