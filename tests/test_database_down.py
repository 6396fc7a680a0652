"""A PostgreSQL that refuses connections or leaves a statement waiting on a lock
(sill/database_down.py): requests are answered 503 ``unavailable`` with ``Retry-After``, as a
cache that is down is (``unavailable`` in the error shape for programs, the "briefly
unavailable" page for people), with one warning, and nothing is half-written.

Seen: PostgreSQL refusing connections (down, restarting, or "too many clients") made every
request a 500: ``server_error`` to agents (which says Sill failed, not to wait a minute),
Django's "Something went wrong" page to people, and an ERROR with a traceback per request.
Sill set no ``lock_timeout``: with the site's audit chain head held by a session that does not
finish, every decision of that site waited for as long as the holder did (forever for a
forgotten ``psql`` session or a hung process), holding a web worker each, with nothing logged.
A Sill process stuck inside a transaction (a hung call while it held locks) was never ended.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, transaction
from django.test import Client

from audit.models import AuditChainHead, AuditRecord
from refunds.models import Mandate, Refund, RefundReason
from tests.refunds.conftest import (  # noqa: F401 (fixtures)
    ORIGINAL,
    agent_key,
    mock_rail,
    original,
    post,
    refund_intent,
    sign,
    signing_key,
)
from tests.threads import row_locked_elsewhere

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

LOGGER = "sill.database_down"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgresql_refusing(how: str) -> Iterator[None]:
    """This process's next connections are refused by PostgreSQL: ``down`` (nothing listens
    where it was: stopped, or restarting) or ``full`` (PostgreSQL answers ``53300 too many
    connections``, as at ``max_connections``: here for a role of its own at its connection
    limit, so that the server's other clients are not crowded out)."""
    saved = dict(connection.settings_dict)
    role = f"sill_full_{secrets.token_hex(4)}"
    password = secrets.token_hex(16)
    if how == "full":
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 0 PASSWORD '{password}'")
    connection.close()
    if how == "down":
        connection.settings_dict["PORT"] = _closed_port()
    else:
        connection.settings_dict.update({"USER": role, "PASSWORD": password})
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        if how == "full":
            with connection.cursor() as cursor:
                cursor.execute(f"DROP ROLE {role}")


def unavailable(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "60"
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unavailable", None)
    assert "briefly unavailable" in error["message"] and "again in a minute" in error["message"]


def logged_once(caplog, starts: str) -> str:
    """One warning by sill.database_down starting with ``starts``; no error (Django's
    "Internal Server Error" with a traceback) beside it. Returns its text."""
    [warning] = [r for r in caplog.records if r.name == LOGGER]
    text = warning.getMessage()
    assert warning.levelno == logging.WARNING and text.startswith(starts), text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    return text


@pytest.mark.parametrize("how", ["down", "full"])
def test_an_agent_gets_503_unavailable_when_postgresql_refuses_connections(
    how,
    sign,  # noqa: F811
    original,  # noqa: F811
    caplog,
):
    body = sign(refund_intent(ORIGINAL))
    records = AuditRecord.objects.count()
    with caplog.at_level(logging.WARNING), postgresql_refusing(how):
        response = post(Client(raise_request_exception=False), body)
    unavailable(response)
    text = logged_once(caplog, "the database cannot be reached (OperationalError): ")
    assert text.endswith("POST refunds:mandates answered 503 unavailable")
    # The class only: psycopg's message names the server's address.
    assert "127.0.0.1" not in text and str(connection.settings_dict["PORT"]) not in text
    assert not Mandate.objects.exists() and not Refund.objects.exists()
    assert AuditRecord.objects.count() == records
    # Sent again once PostgreSQL takes connections: decided, once.
    assert post(Client(), body).status_code == 201
    assert Refund.objects.count() == 1


def test_a_request_whose_connection_postgresql_ended_is_answered_503_and_writes_nothing(
    sign,  # noqa: F811
    original,  # noqa: F811
    caplog,
):
    """A restart or ``pg_terminate_backend`` while a request runs: between two requests Django
    checks a kept connection first (tests/test_database_restarts.py), within one it cannot."""
    body = sign(refund_intent(ORIGINAL))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    killer = connection.get_new_connection(connection.get_connection_params())
    try:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        killer.close()
    with caplog.at_level(logging.WARNING):
        response = post(Client(raise_request_exception=False), body)
    connection.close()  # what Django does with a broken connection once the request is over
    unavailable(response)
    logged_once(caplog, "the database cannot be reached (OperationalError): ")
    assert not Mandate.objects.exists() and not Refund.objects.exists()
    assert post(Client(), body).status_code == 201


def test_people_get_the_briefly_unavailable_page_when_postgresql_refuses_connections(
    client_for, caplog
):
    owner = client_for("owner")
    owner.raise_request_exception = False
    with caplog.at_level(logging.WARNING), postgresql_refusing("full"):
        page = owner.get("/")
        fragment = owner.post("/held/rf_unknown/approve/", headers={"HX-Request": "true"})
    assert page.status_code == 503 and page["Retry-After"] == "60"
    text = page.content.decode()
    assert "<h1" in text and "Sill is briefly unavailable" in text
    assert "nothing was changed" in text and "Try again in a minute." in text
    # An htmx form gets the same words in the form's place, under the page's own h1.
    assert fragment.status_code == 503 and "<h1" not in fragment.content.decode()
    assert "Sill is briefly unavailable" in fragment.content.decode()
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    # Refused before the URL was resolved (the session is read first): no view to name.
    assert warnings == ["the database cannot be reached (OperationalError): GET ? answered 503 "
                        "unavailable", "the database cannot be reached (OperationalError): "
                        "POST ? answered 503 unavailable"]  # fmt: skip
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture
def short_lock_timeout(settings) -> None:
    """Statements give up on a lock after 1 s (10 s by default): set on this process's next
    connection."""
    settings.SILL_DB_LOCK_TIMEOUT_SECONDS = 1
    connection.close()


def test_a_decision_waiting_on_a_stuck_audit_chain_head_is_answered_503_and_writes_nothing(
    make_order,
    agent,
    sign,  # noqa: F811
    original,  # noqa: F811
    short_lock_timeout,
    caplog,
):
    first = make_order(placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTA")
    assert post(Client(), sign(refund_intent(first.source_mandate_id))).status_code == 201
    site_id = original.site_id
    assert AuditChainHead.objects.filter(site_id=site_id).exists()
    before = (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count())
    body = sign(refund_intent(ORIGINAL))

    with (
        caplog.at_level(logging.WARNING),
        row_locked_elsewhere(AuditChainHead, site_id, release_after=4),
    ):
        started = time.monotonic()
        response = post(Client(raise_request_exception=False), body)
        waited = time.monotonic() - started
    unavailable(response)
    assert waited < 3  # the lock timeout, not the holder
    text = logged_once(caplog, "the database gave up waiting for a lock (lock_timeout: ")
    assert 'relation "audit_auditchainhead"' in text  # where an on-call engineer looks
    assert text.endswith("POST refunds:mandates answered 503 unavailable")
    # Rolled back as a whole: the mandate is not stored, nothing decided or recorded.
    assert (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count()) == before
    # The holder gone, the same mandate is decided, once.
    assert post(Client(), body).status_code == 201
    assert Refund.objects.count() == before[1] + 1


def test_a_sill_session_left_idle_in_a_transaction_is_ended_and_its_locks_released(
    settings,
    make_order,
    agent,
    sign,  # noqa: F811
    original,  # noqa: F811
    short_lock_timeout,
):
    first = make_order(placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTA")
    assert post(Client(), sign(refund_intent(first.source_mandate_id))).status_code == 201
    settings.SILL_DB_IDLE_IN_TRANSACTION_SECONDS = 1
    locked, ended = threading.Event(), []

    def stuck_process() -> None:
        # A Sill process that took the chain head and then hung (a call that never returns).
        try:
            with transaction.atomic():
                AuditChainHead.objects.select_for_update().get(site_id=original.site_id)
                locked.set()
                time.sleep(5)
                AuditChainHead.objects.filter(site_id=original.site_id).count()
        except Exception as exc:
            ended.append(exc)
        finally:
            connection.close()

    stuck = threading.Thread(target=stuck_process)
    stuck.start()
    try:
        assert locked.wait(timeout=10)
        time.sleep(2)  # past SILL_DB_IDLE_IN_TRANSACTION_SECONDS
        response = post(Client(raise_request_exception=False), sign(refund_intent(ORIGINAL)))
    finally:
        stuck.join(timeout=20)
    assert response.status_code == 201, response.content  # the stuck session no longer holds it
    # PostgreSQL ended the stuck session: it learns so when it wakes, and committed nothing.
    [error] = ended
    assert "idle-in-transaction timeout" in str(error)


def test_every_connection_gets_sills_lock_and_idle_in_transaction_timeouts(settings):
    # The production default (the tests' own is off: tests/test_settings.py reads both).
    settings.SILL_DB_IDLE_IN_TRANSACTION_SECONDS = 60
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone() == ("10s",)
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone() == ("1min",)
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == ("0",)  # not set: see README "A database that is down"
    settings.SILL_DB_LOCK_TIMEOUT_SECONDS = 0  # 0: off
    settings.SILL_DB_IDLE_IN_TRANSACTION_SECONDS = 300
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone() == ("0",)
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone() == ("5min",)


@contextmanager
def session_ended_at_commit(table: str) -> Iterator[None]:
    """The next transaction that writes ``table`` loses its connection at ``COMMIT``: a
    deferred constraint trigger (it runs as the commit begins) ends its own session, as a
    failover or an operator's ``pg_terminate_backend`` landing at that moment would. The
    client cannot tell a commit that failed from one whose answer was lost."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION sill_test_end_session() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
        )
        cursor.execute(
            f"CREATE CONSTRAINT TRIGGER sill_test_end_session AFTER INSERT ON {table}"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
            " EXECUTE FUNCTION sill_test_end_session()"
        )
    try:
        yield
    finally:
        connection.close()  # what Django does with a broken connection once the request is over
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER sill_test_end_session ON {table}")
            cursor.execute("DROP FUNCTION sill_test_end_session()")


def test_a_connection_lost_at_commit_is_503_saying_it_may_have_been_saved(
    sign,  # noqa: F811
    original,  # noqa: F811
    caplog,
):
    """Seen: the 503 said Sill "did not act on this request" (people: "nothing was changed")
    whatever the database failed at; lost at COMMIT, the change may have been committed."""
    body = sign(refund_intent(ORIGINAL))
    with caplog.at_level(logging.WARNING), session_ended_at_commit(Mandate._meta.db_table):
        response = post(Client(raise_request_exception=False), body)
    unavailable(response)
    message = response.json()["error"]["message"]
    assert "cannot tell whether it was saved" in message and "did not act" not in message
    assert "never acted on twice" in message
    text = logged_once(caplog, "the database cannot be reached (OperationalError) while committing")
    assert text.endswith("POST refunds:mandates answered 503 unavailable")
    # Sent again: decided once, whichever way the commit went.
    assert post(Client(), body).status_code == 201
    assert Refund.objects.count() == 1


def test_people_whose_change_was_lost_at_commit_are_told_to_look_before_trying_again(
    members, site, caplog
):
    client = Client(raise_request_exception=False)
    client.force_login(members["owner"].user)
    with caplog.at_level(logging.WARNING), session_ended_at_commit(RefundReason._meta.db_table):
        response = client.post(
            "/settings/reasons/add/", {"name": "Lost at commit", "code": "lost_at_commit"}
        )
    assert response.status_code == 503 and response["Retry-After"] == "60"
    html = response.content.decode()
    assert "may or may not have been saved" in html and "nothing was changed" not in html
    logged_once(caplog, "the database cannot be reached (OperationalError) while committing")
