"""sill.broker: kombu's Redis transport keeping one client per channel (issue 18).

Against a real Redis (REDIS_URL in CI; else one on the default port): messages go through
the shared client and come back, the client outlives publishes and is rebuilt when kombu
drops its connection pool, and settings choose the transport for Redis brokers only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from kombu import Connection

from sill import broker
from tests.worker import ROOT, reachable_redis_url


@pytest.fixture
def redis_url() -> str:
    url = reachable_redis_url()
    if url is None:
        pytest.skip("no Redis reachable (CI sets REDIS_URL)")
    return url


def test_publishes_share_one_client_and_the_messages_arrive(redis_url: str) -> None:
    with Connection(redis_url, transport="sill.broker:Transport") as conn:
        channel = conn.default_channel
        assert isinstance(channel, broker.Channel)
        queue = conn.SimpleQueue(f"sill-test-broker-{uuid.uuid4().hex}")
        try:
            with channel.conn_or_acquire() as first:
                pass
            for n in range(3):
                queue.put({"n": n})
            with channel.conn_or_acquire() as later:
                assert later is first
                assert later.connection_pool is channel.pool
            assert [queue.get(timeout=5).payload for _ in range(3)] == [
                {"n": 0},
                {"n": 1},
                {"n": 2},
            ]
        finally:
            queue.queue.delete()
            queue.close()


def test_a_replaced_pool_gets_a_new_client(redis_url: str) -> None:
    with Connection(redis_url, transport="sill.broker:Transport") as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as before:
            assert before.ping()
        channel._disconnect_pools()  # what kombu does after a lost connection
        with channel.conn_or_acquire() as after:
            assert after is not before
            assert after.connection_pool is channel.pool
            assert after.ping()


def test_a_client_passed_in_is_used_as_it_is(redis_url: str) -> None:
    import redis

    own = redis.Redis.from_url(redis_url)
    with (
        Connection(redis_url, transport="sill.broker:Transport") as conn,
        conn.default_channel.conn_or_acquire(own) as client,
    ):
        assert client is own


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/15", "sill.broker:Transport"),
        ("rediss://127.0.0.1:6380/15", "sill.broker:Transport"),
        ("filesystem://", None),
        ("amqp://guest:guest@127.0.0.1:5672//", None),
    ],
)
def test_settings_choose_it_for_redis_brokers_only(url: str, transport: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SILL_", "REDIS_URL"))}
    env.update({"SILL_TESTING": "1", "SILL_BROKER_URL": url})
    script = (
        "import json, sill.settings as s; "
        "print(json.dumps(getattr(s, 'CELERY_BROKER_TRANSPORT', None)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == transport
