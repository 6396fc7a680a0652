"""Health checks for load balancers and monitoring (sill/health.py, README "Health checks").

``/healthz`` answers without the database or the cache, whoever asks and whatever is down;
``/readyz`` asks the database, the cache, the broker and beat's heartbeat, each failure induced
for real here (PostgreSQL refusing connections, Redis where nothing listens, a broker where
nothing listens, a heartbeat left behind by travelling in time), and names the failing check
while still reporting the others, never with an address. The checks run in threads of their
own, with their own database connection, so this module's tests commit what they write (a
heartbeat in the test's transaction is not seen by the check's connection).

Seen: Sill had no health endpoint; a load balancer could only probe the login page, which reads
the session (a database query) and, over plain HTTP, is redirected to HTTPS."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from django.test import Client
from django.utils import timezone

from sill.accounts.models import WorkerHeartbeat
from sill.accounts.tasks import record_heartbeat_task
from sill.celery import app
from tests.broker_down import (
    _forget_connections,
    broker_unreachable,
    cache_not_answering,
    cache_unreachable,
)
from tests.test_database_down import postgresql_refusing
from tests.worker import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "sill.health"
CHECKS = {"database", "cache", "broker", "beat"}


@pytest.fixture
def heartbeat() -> None:
    """A worker ran beat's heartbeat just now."""
    record_heartbeat_task("worker-1@sill")


def readiness(client: Client | None = None) -> tuple[int, dict]:
    response = (client or Client()).get("/readyz")
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    return response.status_code, response.json()


def states(body: dict) -> dict[str, str]:
    assert set(body["checks"]) == CHECKS
    return {name: check["status"] for name, check in body["checks"].items()}


def failing_only(body: dict, name: str) -> str:
    """503's body: ``name`` failing, every other check reported ok; returns its reason."""
    assert body["status"] == "failing"
    assert states(body) == {check: ("failing" if check == name else "ok") for check in CHECKS}
    return body["checks"][name]["reason"]


def test_it_answers_healthz_without_the_database_or_a_session(
    client_for, django_assert_num_queries
):
    # A signed-in member's cookie: the session and the member would each be a query.
    client = client_for("owner")
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "sessionid" not in response.cookies and "csrftoken" not in response.cookies
    with django_assert_num_queries(0):
        assert client.head("/healthz").status_code == 200


def test_it_answers_healthz_with_the_cache_down():
    with cache_unreachable():
        response = Client(raise_request_exception=False).get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_it_answers_only_get_and_head():
    for path in ("/healthz", "/readyz"):
        response = Client().post(path)
        assert response.status_code == 405
        assert response["Allow"] == "GET, HEAD"


def test_it_is_ready_when_every_check_passes(heartbeat):
    status, body = readiness()
    assert status == 200 and body["status"] == "ok"
    assert states(body) == dict.fromkeys(CHECKS, "ok")
    assert body["checks"]["beat"]["reason"] == "last heartbeat 0 s ago"
    assert Client().head("/readyz").status_code == 200


def test_it_answers_over_plain_http_with_the_https_redirect_on(settings, heartbeat):
    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.head("/readyz").status_code == 200
    # Every other page is still sent to HTTPS.
    assert client.get("/login/").status_code == 301


def test_it_still_checks_the_host(settings):
    # A load balancer asking by the instance's address is refused unless ALLOWED_HOSTS has it.
    client = Client(raise_request_exception=False)
    assert client.get("/healthz", headers={"Host": "10.0.3.7"}).status_code == 400
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "10.0.3.7"]
    assert client.get("/healthz", headers={"Host": "10.0.3.7"}).status_code == 200


def test_it_leaves_a_signed_in_members_session_alone(client_for, heartbeat):
    client = client_for("owner")
    response = client.get("/readyz")
    assert response.status_code == 200
    assert "sessionid" not in response.cookies
    assert client.get("/").status_code == 200  # still signed in


@pytest.mark.postgres
def test_it_is_not_ready_when_postgresql_refuses_connections(heartbeat, caplog):
    port = str(connection.settings_dict["PORT"])
    with caplog.at_level(logging.WARNING, logger=LOGGER), postgresql_refusing("down"):
        status, body = readiness(Client(raise_request_exception=False))
    assert status == 503 and body["status"] == "failing"
    assert states(body) == {"database": "failing", "beat": "failing", "cache": "ok", "broker": "ok"}
    assert body["checks"]["database"]["reason"] == (
        "the database cannot be reached (OperationalError)"
    )
    assert body["checks"]["beat"]["reason"] == "the heartbeat cannot be read: the database failed"
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    assert "database: the database cannot be reached" in warning.getMessage()
    for text in (str(body), warning.getMessage()):
        assert "127.0.0.1" not in text and port not in text
    # No second record for the same 503 from Django, as an error.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # Ready again once PostgreSQL takes connections.
    assert readiness()[0] == 200


def test_it_is_not_ready_when_the_cache_cannot_be_reached(heartbeat, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER), cache_unreachable() as address:
        status, body = readiness(Client(raise_request_exception=False))
    assert status == 503
    reason = failing_only(body, "cache")
    assert reason == "the cache cannot be reached (ConnectionError)"
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    assert warning.getMessage() == "readyz answered 503: cache: " + reason
    port = address.rsplit(":", 1)[1].split("/")[0]
    assert port not in str(body) and port not in warning.getMessage()


def test_it_is_not_ready_when_the_cache_refuses_its_commands(heartbeat):
    # Redis answers, with an error: here "DB index is out of range" (a REDIS_URL naming a
    # database the server does not have), as it would "READONLY" or "OOM".
    refusing = RedisCache(f"{_redis_url()}/999", {})
    saved = caches["default"]
    caches["default"] = refusing
    try:
        status, body = readiness(Client(raise_request_exception=False))
    finally:
        caches["default"] = saved
        refusing.close()
    assert status == 503
    assert failing_only(body, "cache") == (
        "the cache refused the write or the read (ResponseError)"
    )


def _redis_url() -> str:
    location = settings.CACHES["default"].get("LOCATION")
    if not location:
        pytest.skip("needs Redis (REDIS_URL)")
    return str(location).rsplit("/", 1)[0]


def test_it_is_not_ready_when_the_broker_cannot_be_reached(heartbeat, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER), broker_unreachable() as address:
        status, body = readiness()
    assert status == 503
    reason = failing_only(body, "broker")
    assert reason == "the broker cannot be reached (ConnectionError)"
    port = address.rsplit(":", 1)[1].split("/")[0]
    assert port not in str(body) and port not in caplog.text
    # The publish pool is left as it was: tasks are sent as before once it is back.
    assert readiness()[0] == 200


def test_it_is_not_ready_when_beats_heartbeat_is_stale(heartbeat, time_machine):
    seen = WorkerHeartbeat.objects.get().seen_at
    time_machine.move_to(seen + timedelta(minutes=2, seconds=59), tick=False)
    status, body = readiness()
    assert status == 200 and body["checks"]["beat"]["reason"] == "last heartbeat 179 s ago"

    time_machine.move_to(seen + timedelta(minutes=4), tick=False)
    status, body = readiness()
    assert status == 503
    assert failing_only(body, "beat") == (
        "last heartbeat 240 s ago (beat sends one every minute): beat, or every worker, "
        "is down or stuck"
    )
    # The next heartbeat (any worker's) makes it ready again.
    record_heartbeat_task("worker-2@sill")
    assert readiness()[0] == 200


def test_it_is_not_ready_before_any_heartbeat():
    status, body = readiness()
    assert status == 503
    assert failing_only(body, "beat") == (
        "no heartbeat recorded yet: beat or the workers have never run"
    )


def test_its_heartbeat_is_the_newest_of_any_worker(heartbeat):
    WorkerHeartbeat.objects.create(
        hostname="worker-gone@sill", seen_at=timezone.now() - timedelta(days=2)
    )
    assert readiness()[0] == 200


@pytest.mark.postgres
def test_its_database_check_waits_at_most_postgresqls_connect_timeout():
    # A host that drops packets would otherwise hold the check (and every request opening a
    # connection) as long as the kernel retries: minutes.
    assert connection.settings_dict["OPTIONS"]["connect_timeout"] == 5


@contextmanager
def _listening_unanswered() -> Iterator[int]:
    """A port whose kernel takes connections that nothing ever accepts or answers, as a host
    that hangs (or a firewall that drops its packets once connected) does. Closed after, the
    connections still waiting are reset."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


@contextmanager
def database_not_answering() -> Iterator[str]:
    """The next connections (any thread's) go to a PostgreSQL that never answers; the port is
    yielded."""
    with _listening_unanswered() as port:
        saved = dict(connection.settings_dict)
        connection.settings_dict.update({"HOST": "127.0.0.1", "PORT": str(port)})
        try:
            yield str(port)
        finally:
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)


@contextmanager
def broker_not_answering() -> Iterator[str]:
    with _listening_unanswered() as port:
        saved = app.conf.broker_url
        app.conf.broker_url = f"redis://127.0.0.1:{port}/0"
        _forget_connections()
        try:
            yield str(port)
        finally:
            app.conf.broker_url = saved
            _forget_connections()


def readyz_threads_end() -> None:
    """Every check thread a probe left running has ended (its client's timeouts ended it)."""
    for thread in threading.enumerate():
        if thread.name.startswith("readyz-"):
            thread.join(timeout=30)
            assert not thread.is_alive(), thread.name


@pytest.mark.postgres
def test_it_answers_within_its_deadline_when_every_host_hangs(settings, heartbeat, caplog):
    # Seen: the checks ran one after the other, each waiting out its client's timeouts, so
    # hosts that drop packets held a web worker (and the load balancer's probe) ~17 s.
    settings.SILL_READYZ_SECONDS = 1
    hanging = {"socket_connect_timeout": 5.0, "socket_timeout": 5.0}
    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        database_not_answering() as database_port,
        cache_not_answering(hanging) as cache_address,
        broker_not_answering() as broker_port,
    ):
        started = time.monotonic()
        status, body = readiness(Client(raise_request_exception=False))
        took = time.monotonic() - started
    readyz_threads_end()
    assert took < 2.5, f"/readyz took {took:.1f} s"
    assert status == 503 and body["status"] == "failing"
    assert states(body) == dict.fromkeys(CHECKS, "failing")
    late = "timed out: no answer within 1 s"
    assert {name: check["reason"] for name, check in body["checks"].items()} == {
        "database": late,
        "cache": late,
        "broker": late,
        "beat": "the heartbeat cannot be read: the database failed",
    }
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    cache_port = cache_address.rsplit(":", 1)[1].split("/")[0]
    for text in (str(body), warning.getMessage()):
        for port in (database_port, cache_port, broker_port):
            assert port not in text
    # Ready again once they answer.
    assert readiness()[0] == 200


@pytest.mark.postgres
def test_its_checks_close_their_database_connections(heartbeat):
    def connections_open() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
            return {int(pid) for (pid,) in cursor.fetchall()}

    before = connections_open()
    for _ in range(3):
        assert readiness()[0] == 200
    readyz_threads_end()
    # A backend whose client closed it ends a moment later, and is listed until then (seen on
    # a loaded machine: the last probe's, still there as the test counted). One left open
    # stays listed.
    wait_for(lambda: not connections_open() - before, timeout=10, what="the checks' backends")
