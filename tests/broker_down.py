"""A Celery broker nobody answers at, for the tests of what a request does when its on-commit
message cannot be sent (``sill.queue.enqueue_on_commit``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from sill.celery import app


@contextmanager
def broker_unreachable() -> Iterator[str]:
    """Inside: tasks are published (not run eagerly) to a Redis address where nothing listens,
    so every publish fails as it does with the broker down (kombu's ``OperationalError``, after
    Celery's own publish retries); the address is yielded. After: the test's broker and eager
    tasks again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    saved = (app.conf.task_always_eager, app.conf.broker_url)
    app.conf.task_always_eager = False
    app.conf.broker_url = url
    _forget_connections()
    try:
        yield url
    finally:
        app.conf.task_always_eager, app.conf.broker_url = saved
        _forget_connections()


def _forget_connections() -> None:
    # Celery builds its connection and producer pools from broker_url once; dropped here,
    # they are built again from the current one on the next publish.
    app._pool = None
    app.amqp._producer_pool = None
