"""kombu's Redis transport, with one Redis client per channel instead of one per command.

kombu's Redis channel builds a new ``redis.Redis`` for every publish (``conn_or_acquire``):
the socket comes from the channel's connection pool, but the client object is made afresh,
and redis-py fills a case-insensitive table of about 170 response callbacks for each one.
On the decision path that was a quarter of the on-commit enqueue's CPU (issue 18). A client
over a connection pool is safe to share — it holds no connection of its own; each command
takes one from the pool and gives it back — so the channel keeps one, built again whenever
kombu replaces the pool (after a disconnect, ``_disconnect_pools`` drops it). Everything else
is kombu's transport as it is: settings select it for ``redis://`` and ``rediss://`` brokers
(``CELERY_BROKER_TRANSPORT``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Transport(redis.Transport):
    Channel = Channel
