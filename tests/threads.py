"""Run work in real concurrent threads, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, models, transaction

# Other sessions of this test database only (the pid filter): pg_locks lists the whole
# server's locks, and another test process (`make test` runs two) may be waiting meanwhile.
# pg_stat_activity would not do: it is a snapshot taken once per transaction, and misses a
# session opened after it.
PIDS_HERE = (
    "(SELECT pid FROM pg_locks WHERE database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()))"
)
OTHER_SESSIONS_HERE = f"pid <> pg_backend_pid() AND pid IN {PIDS_HERE}"
ROW_LOCKS = " AND locktype IN ('transactionid', 'tuple')"


def lock_waiters(raw: Any, *, row_locks_only: bool = False) -> int:
    """How many other sessions of this test database wait for a lock (``row_locks_only``: for
    a row's); ``raw`` is a psycopg connection of its own."""
    kinds = ROW_LOCKS if row_locks_only else ""
    sql = f"SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted AND {OTHER_SESSIONS_HERE}"
    return int(raw.execute(sql + kinds).fetchone()[0])


def someone_waits(raw: Any, *, row_locks_only: bool = False, timeout: float = 20) -> bool:
    """Whether another session of this test database comes to wait for a lock in ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock_waiters(raw, row_locks_only=row_locks_only):
            return True
        time.sleep(0.01)
    return False


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


@contextmanager
def row_locked_elsewhere(
    model: type[models.Model], pk: Any, *, release_after: float | None = None
) -> Iterator[None]:
    """Another connection holds the row's ``SELECT … FOR UPDATE`` lock while the block runs:
    until it ends, or ``release_after`` seconds after it starts (for a block that waits on the
    lock itself)."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                model._default_manager.select_for_update().get(pk=pk)
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    timer = threading.Timer(release_after, release.set) if release_after is not None else None
    try:
        assert locked.wait(timeout=10), "the row lock was not taken"
        if timer is not None:
            timer.start()
        yield
    finally:
        if timer is not None:
            timer.cancel()
        release.set()
        holder.join(timeout=30)


def run_while_a_writer_holds_then_appends(
    *, table: str, row_id: str, site_id: str, run: Callable[[], object]
) -> object:
    """``run()`` in a thread while another connection does what a refund, a settlement or a
    sync does: it holds ``table``'s row ``row_id`` (``FOR UPDATE``), waits until ``run``
    waits for a row lock, then takes the site's audit chain head and commits. Returns what
    ``run`` returned, or the exception it raised: a ``run`` that appended before asking for
    the row deadlocks with the writer (PostgreSQL only)."""
    import contextlib

    import psycopg

    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(run())
        except Exception as exc:  # returned to the caller
            outcome.append(exc)
        finally:
            connection.close()

    try:
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            raw.execute("SET deadlock_timeout = '30s'")  # the run is the one that detects it
        raw.execute("BEGIN")
        raw.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [row_id])
        running = threading.Thread(target=target)
        running.start()
        assert someone_waits(raw, row_locks_only=True)
        raw.execute("SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site_id])
        raw.execute("COMMIT")
        running.join(timeout=60)
    finally:
        raw.close()
    (result,) = outcome
    return result


def run_while_an_append_commits(*, site_id: str, run: Callable[[], object]) -> object:
    """``run()`` in a thread while another connection does what every append to the site's
    audit chain does: it holds the chain head, waits until ``run`` waits for a lock, then
    commits, and its commit checks its deferred foreign keys to the site (Django's are
    ``DEFERRABLE INITIALLY DEFERRED``): ``FOR KEY SHARE`` of the site's row, taken only then,
    while the head is still held. A ``run`` that locked the site's row ``FOR UPDATE`` (a
    ``select_for_update()`` joining the site without ``of=``) before asking for the head
    deadlocks with it; ``FOR NO KEY UPDATE`` lets ``KEY SHARE`` by. ``run``'s connection detects the deadlock (in 0.1 s rather than the
    server's second). Returns what ``run`` returned, or the exception it raised (PostgreSQL
    only)."""
    import contextlib

    import psycopg

    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcome: list[object] = []

    def target() -> None:
        try:
            with (
                contextlib.suppress(psycopg.errors.InsufficientPrivilege),
                connection.cursor() as cursor,
            ):
                cursor.execute("SET deadlock_timeout = '100ms'")
            outcome.append(run())
        except Exception as exc:  # returned to the caller
            outcome.append(exc)
        finally:
            connection.close()

    try:
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            raw.execute("SET deadlock_timeout = '30s'")  # the run is the one that detects it
        raw.execute("BEGIN")
        head = raw.execute(
            "SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site_id]
        ).fetchone()
        assert head is not None, "the site has no audit chain yet: append to it first"
        # A row that names the site, as an audit record does: its foreign key is checked at
        # COMMIT.
        raw.execute(
            "INSERT INTO accounts_agent (site_id, agent_id, name, active, created_at) "
            "VALUES (%s, 'agent_appending_elsewhere', 'probe', false, now())",
            [site_id],
        )
        running = threading.Thread(target=target)
        running.start()
        assert someone_waits(raw)
        raw.execute("COMMIT")
        running.join(timeout=60)
    finally:
        raw.close()
    (result,) = outcome
    return result


def run_behind_a_member_change(
    *, site_id: str, change: Callable[[], object], run: Callable[[], object]
) -> tuple[object, object]:
    """``run()`` in a thread while an owner's ``change()`` of the acting member (a removal, a
    role change, a Slack unlink) is in flight in another: it has written the member's rows
    and waits for the site's audit chain head, which a third connection holds (an append of
    the site, e.g. a refund's decision). ``run`` starts then, so the check it makes before its
    transaction still sees the member as they were; once it waits for a lock too, the append
    commits, and the change goes first. Returns what ``change`` and ``run`` returned (or
    raised): a ``run`` that does not hold the member's rows in its transaction
    (``access.hold_member``) acts after the owner's change was confirmed, as the member the
    change took away (PostgreSQL only)."""
    import time

    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcomes: dict[str, list[object]] = {"change": [], "run": []}
    # The two threads' sessions: other test processes share the server and its pg_locks.
    pids: list[int] = []

    def thread(name: str, work: Callable[[], object]) -> threading.Thread:
        def target() -> None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pids.append(cursor.fetchone()[0])
                outcomes[name].append(work())
            except Exception as exc:  # returned to the caller
                outcomes[name].append(exc)
            finally:
                connection.close()

        started = threading.Thread(target=target)
        started.start()
        return started

    def waiting() -> int:
        row = raw.execute(
            "SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted AND pid = ANY(%s)",
            [list(pids)],
        ).fetchone()
        return int(row[0]) if row else 0

    def until_waiting(count: int) -> None:
        deadline = time.monotonic() + 20
        while waiting() < count:
            assert time.monotonic() < deadline, "timed out waiting for a lock wait"
            assert not any(outcomes.values()), f"ended without waiting: {outcomes}"
            time.sleep(0.005)

    try:
        raw.execute("BEGIN")
        head = raw.execute(
            "SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site_id]
        ).fetchone()
        assert head is not None, "the site has no audit chain yet: append to it first"
        changing = thread("change", change)
        until_waiting(1)
        running = thread("run", run)
        until_waiting(2)
        raw.execute("COMMIT")
        changing.join(timeout=30)
        running.join(timeout=30)
    finally:
        raw.close()
    (changed,), (ran,) = outcomes["change"], outcomes["run"]
    return changed, ran
