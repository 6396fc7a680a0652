"""Health checks for load balancers and monitoring: ``GET /healthz`` and ``GET /readyz``.

``/healthz`` (liveness) says the process answers HTTP: ``200 {"status": "ok"}``, touching
neither the database nor the cache. ``/readyz`` (readiness) asks each thing a request needs —
the database (a trivial query), the cache (a write and a read), the Celery broker (a
connection) — and whether beat's heartbeat is recent; ``200`` when every check passes, ``503``
when any fails, with each check's state and a reason in words. Reasons name an error's class,
never an address: ``DATABASE_URL``, ``REDIS_URL`` and ``SILL_BROKER_URL`` may carry
passwords, and drivers' messages name hosts and ports (as ``sill.cache_down`` and
``sill.database_down`` log them).

Both are answered by :class:`HealthCheckMiddleware`, placed right after Django's
``SecurityMiddleware`` (exempt from its HTTPS redirect: ``SECURE_REDIRECT_EXEMPT``), so no
session is read or written, no member is looked up (which would query the database behind a
stray session cookie), and no CSRF, two-factor, rate limit or cache guard stands between a
load balancer and the answer. The ``Host`` header is still checked against ``ALLOWED_HOSTS``
(README "Health checks").

The checks run at once, each in a thread of its own, and ``/readyz`` waits for them at most
``SILL_READYZ_SECONDS`` (4 s by default) in all: a check still running then is reported failing,
"timed out", and left to end on its client's own timeouts (the cache's and the broker's options
in ``sill/settings.py``, PostgreSQL's ``connect_timeout``), its answer unread. Run one after
the other, hosts that drop packets held a web worker about 17 s, longer than a load balancer
waits. The database check's thread opens a connection of its own (Django's are per thread)
and closes it when it ends; the cache is the request thread's (redis' pool is thread-safe), so
no pool is made per probe.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.db import DatabaseError, connection
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.utils import timezone
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from sill.accounts.models import WorkerHeartbeat
from sill.cache_down import CACHE_UNREACHABLE
from sill.celery import app
from sill.database_down import unavailable_because

logger = logging.getLogger(__name__)

# Beat sends ``sill.heartbeat`` every minute (sill/accounts/migrations/0003) and a worker stamps
# ``WorkerHeartbeat`` when it runs it: three missed minutes is beat (or every worker) down, not
# a heartbeat waiting behind a busy queue for a moment.
HEARTBEAT_STALE_AFTER = timedelta(minutes=3)

OK = "ok"
FAILING = "failing"
_BEAT_UNREAD = "the heartbeat cannot be read: "


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering: nothing else is asked."""
    return JsonResponse({"status": OK})


def readyz(request: HttpRequest) -> HttpResponse:
    """Every check, each ``{"status": "ok" | "failing", "reason": ...}``; 503 when any fails."""
    checks = run_checks(deadline=float(settings.SILL_READYZ_SECONDS))
    failing = {name: reason for name, (ok, reason) in checks.items() if not ok}
    body = {
        "status": FAILING if failing else OK,
        "checks": {
            name: {"status": OK if ok else FAILING, "reason": reason}
            for name, (ok, reason) in checks.items()
        },
    }
    response = JsonResponse(body, status=503 if failing else 200)
    if failing:
        logger.warning(
            "readyz answered 503: %s",
            "; ".join(f"{name}: {reason}" for name, reason in failing.items()),
        )
        # Logged above, as a warning: not again by Django as an error, every time the load
        # balancer asks.
        response._has_been_logged = True  # type: ignore[attr-defined]
    return response


Check = tuple[bool, str]
CHECK_NAMES = ("database", "cache", "broker", "beat")


def run_checks(*, deadline: float) -> dict[str, Check]:
    """Every check at once, each in a thread named ``readyz-<check>``; waits ``deadline``
    seconds at most in all. A check without an answer by then is failing, "timed out"."""
    results: dict[str, Check] = {}
    lock = threading.Lock()

    def report(name: str, check: Check) -> None:
        with lock:
            results[name] = check

    # Resolved here: Django's cache handler is per thread, and a thread's own would build a
    # client (and a connection pool) per probe, never closed.
    the_cache = caches["default"]
    jobs: dict[str, Callable[[], None]] = {
        "database": lambda: _database_then_beat(report),
        "cache": lambda: report("cache", check_cache(the_cache)),
        "broker": lambda: report("broker", check_broker()),
    }
    threads = [
        threading.Thread(target=job, name=f"readyz-{name}", daemon=True)
        for name, job in jobs.items()
    ]
    ends = time.monotonic() + deadline
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, ends - time.monotonic()))
    with lock:
        answered = dict(results)
    late = (False, f"timed out: no answer within {deadline:g} s")
    checks = {name: answered.get(name, late) for name in CHECK_NAMES}
    if not checks["database"][0] and "beat" not in answered:
        checks["beat"] = (False, _BEAT_UNREAD + "the database failed")
    return checks


def _database_then_beat(report: Callable[[str, Check], None]) -> None:
    try:
        database = check_database()
        report("database", database)
        # The heartbeat is a row: with the database failing, asking again would only wait out
        # its connect timeout a second time.
        if database[0]:
            report("beat", check_beat())
        else:
            report("beat", (False, _BEAT_UNREAD + "the database failed"))
    finally:
        # This thread's own connection: a probe every few seconds would otherwise leave one
        # open per probe until the garbage collector found its thread gone.
        connection.close()


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return False, unavailable_because(exc) or f"the database failed ({type(exc).__name__})"
    return True, "answered a query"


def check_cache(cache: BaseCache) -> Check:
    # A write and its read: the rate limits and replay guards write, so a cache that only
    # reads (a replica promoted wrong, a full memory with noeviction) cannot serve them.
    key = "sill:readyz"
    value = secrets.token_hex(8)
    try:
        cache.set(key, value, timeout=60)
        read = cache.get(key)
    except CACHE_UNREACHABLE as exc:
        return False, f"the cache cannot be reached ({type(exc).__name__})"
    except RedisError as exc:
        # Reached, and refused: a read-only replica, a full memory, a database index it does
        # not have. A request would be a 500 for it; here it is one check failing.
        return False, f"the cache refused the write or the read ({type(exc).__name__})"
    if read != value:
        return False, "the cache did not keep what was written to it"
    return True, "answered a write and a read"


def check_broker() -> Check:
    # A connection of its own (not the publish pool's), made once: no retries, so it waits no
    # longer than the broker's connect and socket timeouts (CELERY_BROKER_TRANSPORT_OPTIONS).
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0)
    except (KombuError, OSError) as exc:
        cause = exc.__cause__ or exc
        return False, f"the broker cannot be reached ({type(cause).__name__})"
    return True, "took a connection"


def check_beat() -> Check:
    try:
        last = WorkerHeartbeat.objects.aggregate(last=Max("seen_at"))["last"]
    except DatabaseError as exc:
        return False, f"{_BEAT_UNREAD}the database failed ({type(exc).__name__})"
    if last is None:
        return False, "no heartbeat recorded yet: beat or the workers have never run"
    age = int((timezone.now() - last).total_seconds())
    if timedelta(seconds=age) > HEARTBEAT_STALE_AFTER:
        return False, (
            f"last heartbeat {age} s ago (beat sends one every minute): beat, or every worker, "
            "is down or stuck"
        )
    return True, f"last heartbeat {max(age, 0)} s ago"


_VIEWS: dict[str, Callable[[HttpRequest], HttpResponse]] = {"/healthz": healthz, "/readyz": readyz}


class HealthCheckMiddleware:
    """Answers ``/healthz`` and ``/readyz`` before sessions, members, CSRF and guards."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = _VIEWS.get(request.path_info)
        if view is None:
            return self.get_response(request)
        # What CommonMiddleware would have done first: a Host outside ALLOWED_HOSTS is refused
        # (DisallowedHost, a 400), here as anywhere.
        request.get_host()
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        response = view(request)
        # A cached "ok" would hide an outage from whoever reads it next.
        response["Cache-Control"] = "no-store"
        return response
