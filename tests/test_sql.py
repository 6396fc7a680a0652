"""sill.sql: hand-written reads give the instances the ORM gives, writes store what ``save``
stores, on SQLite and PostgreSQL alike (the converters are the backend's: SQLite datetimes are
text, booleans integers, JSON text)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction

from refunds.models import Mandate
from sill.accounts.models import Agent, Site
from sill.rails.models import RailAccount
from sill.sql import (
    cols,
    fast_timestamptz_loader,
    fetch_row,
    for_update,
    insert,
    insert_write,
    insert_write_later,
    update_write,
)
from sill.sql import cursor as sql_cursor

pytestmark = pytest.mark.django_db


def _same(built: object, loaded: object) -> None:
    for field in type(loaded)._meta.concrete_fields:  # type: ignore[attr-defined]
        assert getattr(built, field.attname) == getattr(loaded, field.attname), field.name
        assert type(getattr(built, field.attname)) is type(getattr(loaded, field.attname)), (
            field.name
        )


def test_a_built_row_is_the_instance_the_orm_loads(site: Site) -> None:
    # Booleans, JSON, binary, datetimes and choices: each backend's conversions.
    account = RailAccount.objects.create(
        site=site,
        rail="mock",
        enabled=False,
        secret_encrypted=b"\x00sealed\xff",
        config={"nested": {"list": [1, "two", None]}, "flag": True},
    )
    ra = cols(RailAccount, "ra")
    row = fetch_row(f"SELECT {ra.sql} FROM rails_railaccount ra WHERE ra.id = %s", [account.pk])
    assert row is not None
    built = ra.build(row)
    loaded = RailAccount.objects.get(pk=account.pk)
    _same(built, loaded)
    assert built.config == {"nested": {"list": [1, "two", None]}, "flag": True}
    assert built.enabled is False and built.created_at.tzinfo is not None
    assert not built._state.adding and built._state.db == "default"


def test_columns_of_two_models_in_one_row(site: Site, agent: Agent) -> None:
    a, s = cols(Agent, "a"), cols(Site, "s")
    row = fetch_row(
        f"SELECT {a.sql}, {s.sql} FROM accounts_agent a JOIN accounts_site s ON s.id = a.site_id"
        " WHERE a.id = %s",
        [agent.pk],
    )
    assert row is not None and len(row) == len(a) + len(s)
    _same(a.build(row), Agent.objects.get(pk=agent.pk))
    _same(s.build(row, len(a)), Site.objects.get(pk=site.pk))


def test_only_some_columns_leaves_the_rest_deferred(site: Site, agent: Agent) -> None:
    a = cols(Agent, "a", only=("agent_id",))
    assert [f.name for f in a.fields] == ["id", "agent_id"]
    row = fetch_row(f"SELECT {a.sql} FROM accounts_agent a WHERE a.id = %s", [agent.pk])
    assert row is not None
    built = a.build(row)
    assert built.get_deferred_fields() >= {"name", "site_id"}
    assert built.name == agent.name  # loaded on access, as after .only()


def test_no_row_is_none(site: Site) -> None:
    assert fetch_row("SELECT id FROM accounts_site WHERE id = %s", ["nope"]) is None


def test_insert_stores_what_save_would(site: Site, agent: Agent) -> None:
    issued = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)
    fields = {
        "site": site,
        "agent": agent,
        "key_id": "k1",
        "action": "request_refund",
        "raw": b'{"signed": {}}',
        "body_sha256": "0" * 64,
        "issued_at": issued,
        "expires_at": issued,
    }
    mine = insert(Mandate(mandate_id="mnd_a", nonce="n-a", **fields))
    theirs = Mandate.objects.create(mandate_id="mnd_b", nonce="n-b", **fields)

    assert mine.pk is not None and mine.pk != theirs.pk  # the auto id read back
    assert not mine._state.adding and mine._state.db == "default"
    stored = Mandate.objects.get(pk=mine.pk)
    for field in Mandate._meta.concrete_fields:
        if field.name in {"id", "mandate_id", "nonce", "received_at", "created_at"}:
            continue
        assert getattr(stored, field.attname) == getattr(theirs, field.attname), field.name
    assert stored.issued_at == issued
    assert mine.received_at is not None and stored.received_at == mine.received_at  # auto_now_add


def test_insert_refuses_what_the_constraints_refuse(site: Site, agent: Agent) -> None:
    fields = {
        "site": site,
        "agent": agent,
        "mandate_id": "mnd_same",
        "key_id": "k1",
        "nonce": "n-1",
        "action": "request_refund",
        "raw": b"{}",
        "body_sha256": "0" * 64,
        "issued_at": datetime(2026, 12, 1, tzinfo=UTC),
        "expires_at": datetime(2026, 12, 1, tzinfo=UTC),
    }
    insert(Mandate(**fields))
    with pytest.raises(IntegrityError), transaction.atomic():
        insert(Mandate(**{**fields, "nonce": "n-2"}))  # the same (site, mandate_id)
    assert Mandate.objects.filter(mandate_id="mnd_same").count() == 1


def _mandate(site: Site, agent: Agent, mandate_id: str) -> Mandate:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    return Mandate(
        site=site, agent=agent, mandate_id=mandate_id, key_id="k1", nonce=f"n-{mandate_id}",
        action="request_refund", raw=b"{}", body_sha256="0" * 64, issued_at=at, expires_at=at,
    )  # fmt: skip


def test_an_insert_write_alone_stores_what_insert_would(site: Site, agent: Agent) -> None:
    mandate = _mandate(site, agent, "mnd_write")
    mandate.pk = 10_000  # an insert_write reads nothing back: the caller sets the key
    write = insert_write(mandate)
    assert mandate._state.adding
    with sql_cursor() as c:
        c.execute(write.alone, write.params)
    assert write.done is not None
    write.done()
    assert not mandate._state.adding
    stored = Mandate.objects.get(pk=10_000)
    assert (stored.mandate_id, stored.nonce, stored.agent_id) == (
        "mnd_write",
        "n-mnd_write",
        agent.pk,
    )


def test_an_insert_write_later_prepares_the_rest_once_and_takes_the_field_late(
    site: Site, agent: Agent
) -> None:
    mandate = _mandate(site, agent, "mnd_later")
    mandate.pk = 10_002
    write = insert_write_later(mandate, "body_sha256")
    received = mandate.received_at  # auto_now_add: set once, when the other values were
    first, second = write("a" * 64), write("b" * 64)
    assert mandate.received_at == received
    assert first.alone == second.alone == insert_write(mandate).alone
    assert [p for p in first.params if p != "a" * 64] == [p for p in second.params if p != "b" * 64]
    with sql_cursor() as c:
        c.execute(second.alone, second.params)
    assert second.done is not None
    second.done()
    assert not mandate._state.adding
    stored = Mandate.objects.get(pk=10_002)
    assert (stored.body_sha256, stored.mandate_id, stored.received_at) == (
        "b" * 64,
        "mnd_later",
        received,
    )
    with pytest.raises(ValueError, match="no column"):
        insert_write_later(mandate, "no_such_field")


@pytest.mark.parametrize("matched", [True, False])
def test_writes_given_a_row_source_write_only_when_it_has_a_row(
    site: Site, agent: Agent, matched: bool
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the given forms are for PostgreSQL's data-modifying WITH")
    mandate = _mandate(site, agent, "mnd_given")
    mandate.pk = 10_001
    writes = [
        insert_write(mandate),
        update_write("accounts_agent", '"name" = %s', ["Renamed"], pk=agent.pk),
    ]
    source = '"src"'
    carried = ", ".join(
        f'"w{i}" AS ({w.given.format(source=source)})' for i, w in enumerate(writes)
    )
    with sql_cursor() as c:
        c.execute(
            f'WITH "src" AS (SELECT 1 WHERE %s), {carried} SELECT 1',
            [matched, *(v for w in writes for v in w.params)],
        )
    agent.refresh_from_db()
    assert Mandate.objects.filter(pk=10_001).exists() is matched
    assert (agent.name == "Renamed") is matched


def test_a_write_that_fails_raises_and_writes_nothing(site: Site, agent: Agent) -> None:
    write = update_write("accounts_agent", '"agent_id" = %s', [None], pk=agent.pk)
    with pytest.raises(IntegrityError), transaction.atomic(), sql_cursor() as c:
        c.execute(write.alone, write.params)
    agent.refresh_from_db()
    assert agent.agent_id


def test_for_update_locks_where_the_backend_locks_rows() -> None:
    if connection.vendor == "postgresql":
        assert for_update("c") == ' FOR UPDATE OF "c"'
        assert for_update() == " FOR UPDATE"
    else:
        assert for_update("c") == "" and for_update() == ""


def _prepared() -> list[str]:
    with connection.cursor() as c:
        c.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in c.fetchall()]


def test_postgresql_prepares_these_statements_and_not_the_orms(site: Site) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    for _ in range(2):
        assert fetch_row("SELECT %s::text AS sill_probe", ["x"]) == ("x",)
    assert sum("sill_probe" in s for s in _prepared()) == 1  # prepared once, then reused
    before = len(_prepared())
    for n in range(10):
        assert not Site.objects.filter(name=f"no such site {n}").exists()
    assert len(_prepared()) == before  # the ORM's statements are bound client-side


def test_postgresql_converts_a_long_statement_once_and_binds_every_value() -> None:
    """The audit append is past psycopg's own cache limits (4 kB, 50 parameters): converted
    once per process here, each run still binding its own values."""
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's statement conversion")
    from sill.sql import _postgresql

    converted = _postgresql().converted
    assert converted is not None, "this psycopg lacks the internals sill.sql converts with"
    values = 60
    sql = "SELECT " + ", ".join(f"%s::bigint AS sill_long_{'x' * 60}_{i}" for i in range(values))
    assert len(sql) > 4096
    before = converted.cache_info()
    for run in range(3):
        params = [run * 1000 + i for i in range(values)]
        assert fetch_row(sql, params) == tuple(params)
    after = converted.cache_info()
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == 2
    # A statement with no values is not converted (psycopg sends it as written).
    assert fetch_row("SELECT 1 AS sill_no_values", None) == (1,)
    assert converted.cache_info().misses == after.misses


# Edge values for the timestamp loaders: fractions of every length, offsets PostgreSQL folds
# into UTC, the range's ends, a leap day, NULL.
TIMESTAMPS = [
    "2026-12-02 01:05:28.123456+00",
    "2026-12-02 01:05:28+00",
    "2026-12-02 01:05:28.1+00",
    "2026-03-29 01:30:00.5+01",
    "2026-10-25 02:30:00-07:30",
    "2028-02-29 23:59:59.999999+14",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    None,
]


def _read(cursor: object, raw_cursor: object) -> tuple[object, ...]:
    sql = "SELECT " + ", ".join(["%s::timestamptz"] * len(TIMESTAMPS))
    raw_cursor.execute(sql, TIMESTAMPS)  # type: ignore[attr-defined]
    return tuple(raw_cursor.fetchone())  # type: ignore[attr-defined]


def test_postgresql_reads_timestamps_with_the_c_loader_as_django_would() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's loaders are PostgreSQL's")
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    connection.ensure_connection()
    loader = connection.connection.adapters.get_loader(1184, Format.TEXT)
    assert loader.__name__ == "UtcTimestamptzLoader"
    with connection.cursor() as ours, connection.cursor() as djangos:
        register_tzloader(connection.timezone, djangos.cursor)  # Django's own, on this one
        fast, slow = _read(ours, ours.cursor), _read(djangos, djangos.cursor)
    assert fast == slow
    for a, b in zip(fast, slow, strict=True):
        assert type(a) is type(b)
        if a is not None:
            assert a.tzinfo is b.tzinfo is UTC  # type: ignore[attr-defined]
    # The hot path's prepared cursors read them the same way.
    with sql_cursor() as hot:
        assert _read(hot, hot) == slow


def test_another_session_time_zone_keeps_djangos_loader() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's loaders are PostgreSQL's")
    from psycopg.pq import Format

    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        other.ensure_connection()
        raw = other.connection
        raw.execute("SET TIME ZONE 'Europe/Paris'")
        from django.db.backends.postgresql.psycopg_any import register_tzloader

        register_tzloader(other.timezone, raw)  # as Django set the connection up
        fast_timestamptz_loader(sender=type(other), connection=other)
        loader = raw.adapters.get_loader(1184, Format.TEXT)
        assert loader.__name__ == "SpecificTzLoader"
    finally:
        other.close()
