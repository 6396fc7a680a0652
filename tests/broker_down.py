"""A Celery broker or a cache nobody answers at: for the tests of what a request does when its
on-commit message cannot be sent (``sill.queue.enqueue_on_commit``), and when the cache its
rate limits and replay guards count in cannot be reached (``sill.cache_down``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from sill.celery import app


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def broker_unreachable() -> Iterator[str]:
    """Inside: tasks are published (not run eagerly) to a Redis address where nothing listens,
    so every publish fails as it does with the broker down (kombu's ``OperationalError``, after
    Celery's own publish retries); the address is yielded. After: the test's broker and eager
    tasks again."""
    url = f"redis://127.0.0.1:{_free_port()}/0"
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


@contextmanager
def cache_unreachable() -> Iterator[str]:
    """Inside: Django's default cache is Redis at an address where nothing listens, so every
    cache call fails as it does with Redis down (redis' ``ConnectionError``); the address is
    yielded. The broker is left alone (tasks still run eagerly). After: the test's cache."""
    url = f"redis://127.0.0.1:{_free_port()}/0"
    dead = RedisCache(url, {})
    # The handler's connection is swapped, not settings.CACHES: an override of the settings
    # interleaved with pytest-django's ``settings`` changes would outlive the test. Every
    # ``cache`` (and DRF's throttles' ``default_cache``) looks ``caches["default"]`` up.
    saved = caches["default"]
    caches["default"] = dead
    try:
        yield url
    finally:
        caches["default"] = saved
        dead.close()


@contextmanager
def cache_not_answering(options: dict[str, object]) -> Iterator[str]:
    """Inside: Django's default cache is Redis (with ``options``) at an address whose kernel
    takes the connection and nothing ever answers it, as a Redis host that hangs does (or a
    firewall that drops its packets once connected): a call waits as long as the options let it.
    The address is yielded. After: the test's cache."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshakes; nothing accepts or reads
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        hanging = RedisCache(url, {"OPTIONS": options})
        saved = caches["default"]
        caches["default"] = hanging
        try:
            yield url
        finally:
            caches["default"] = saved
            hanging.close()
