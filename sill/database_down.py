"""What Sill does when PostgreSQL cannot serve a request: it refuses connections, lost this
one, or left a statement waiting on a lock.

Every new PostgreSQL connection gets two session limits (:func:`set_session_limits`, on
``connection_created``): ``lock_timeout`` (``SILL_DB_LOCK_TIMEOUT_SECONDS``), so a statement
waiting for a row that another session holds and does not let go of (the site's audit chain
head under a forgotten ``psql`` transaction, say: every decision of the site waits on it)
gives up instead of holding its web worker as long as the holder lives; and
``idle_in_transaction_session_timeout`` (``SILL_DB_IDLE_IN_TRANSACTION_SECONDS``), so a Sill
process that hangs inside a transaction (a call that never returns while it holds locks) has
its session ended by PostgreSQL, which rolls it back and releases them. Sill's transactions
last milliseconds; the one outside call made inside one is an invitation's email
(:mod:`sill.accounts.invites`), which that limit bounds too. Set as SQL on connecting rather
than as libpq startup ``options``, which connection poolers such as PgBouncer may refuse. No
``statement_timeout``: a decision's statements and those of reports and sweeps differ too much
for one limit; one the operator sets for Sill's role is answered as below.

A request that fails for one of these reasons (:func:`unavailable_because`) is answered by
``sill.error_pages.server_error`` as a cache that is down is: ``503 unavailable`` with
``Retry-After``, never a ``500``. The failed statement's transaction was rolled back, so a
decision is stored whole or not at all, and a resent mandate, webhook event or request with
the same ``Idempotency-Key`` is never acted on twice. The one place that covers them all:
PostgreSQL is first asked inside middleware (the session, the member) as often as in a view,
and Django answers an error raised there through ``handler500`` before any outer middleware
sees it. One warning is logged per request, saying why and naming the view, never the
database's address (psycopg's message names host and port).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest

logger = logging.getLogger(__name__)

# SQLSTATEs that mean "not now" rather than "wrong": PostgreSQL ran out of something (53: too
# many connections, out of memory, disk full), an operator or a restart intervened (57: the
# session was terminated, the server is shutting down or starting up), the connection broke
# (08), or this session sat idle in its transaction past its limit (25P03).
_UNREACHABLE_CLASSES = ("08", "53", "57")
_LOCK_TIMEOUT = "55P03"  # lock_not_available: lock_timeout ran out (or a NOWAIT was refused)
_STATEMENT_TIMEOUT = "57014"  # query_canceled: statement_timeout (or pg_cancel_backend)
_IDLE_IN_TRANSACTION = "25P03"


def set_session_limits(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: this connection's ``lock_timeout`` and
    ``idle_in_transaction_session_timeout`` from the settings (0 switches one off). One round
    trip per new connection: web processes keep theirs (``conn_max_age``)."""
    if connection.vendor != "postgresql":
        return
    lock = int(settings.SILL_DB_LOCK_TIMEOUT_SECONDS)
    idle = int(settings.SILL_DB_IDLE_IN_TRANSACTION_SECONDS)
    # Session-wide (is_local false), in autocommit: Django calls this before any transaction.
    connection.connection.execute(
        "SELECT set_config('lock_timeout', %s, false), "
        "set_config('idle_in_transaction_session_timeout', %s, false)",
        [f"{lock}s", f"{idle}s"],
    )


def unavailable_because(exc: BaseException) -> str | None:
    """Why PostgreSQL could not serve the request that raised ``exc``, in words for the log;
    None when ``exc`` is not such a failure (a defect stays a 500)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return None
    cause = exc.__cause__
    sqlstate: str | None = getattr(cause, "sqlstate", None)
    if sqlstate == _LOCK_TIMEOUT:
        # Where it waited ("while updating tuple (0,1) in relation "audit_auditchainhead""):
        # what the on-call engineer looks up in pg_locks. A relation and a row position, no data.
        where = getattr(getattr(cause, "diag", None), "context", None) or "no relation named"
        return f"the database gave up waiting for a lock (lock_timeout: {where.strip()})"
    if sqlstate == _STATEMENT_TIMEOUT:
        return "the database cancelled a statement (statement_timeout)"
    # No SQLSTATE: psycopg's own error, raised when it could not connect or the connection
    # broke (PostgreSQL sends no error code for a refused connection).
    if sqlstate is None or sqlstate[:2] in _UNREACHABLE_CLASSES or sqlstate == _IDLE_IN_TRANSACTION:
        return f"the database cannot be reached ({type(exc).__name__})"
    return None


# The function every COMMIT of Django's goes through (``atomic``'s outermost exit included).
_COMMIT_CODE = BaseDatabaseWrapper._commit.__code__  # type: ignore[attr-defined]


def lost_at_commit(exc: BaseException) -> bool:
    """Whether ``exc`` broke a ``COMMIT``: the connection was lost, or the session ended, while
    PostgreSQL was committing. Then nobody here knows whether the transaction was committed
    (the server may have committed it and lost the answer on the way), and a 503 must not say
    that nothing was done."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is _COMMIT_CODE:
            return True
        tb = tb.tb_next
    return False


def log_unavailable(request: HttpRequest, why: str) -> None:
    # The view by its URL name (a path can carry a capability token); "?" when the request
    # failed in middleware, before its URL was resolved.
    match = request.resolver_match
    logger.warning(
        "%s: %s %s answered 503 unavailable",
        why,
        request.method,
        match.view_name if match is not None else "?",
    )
