"""Hand-written reads for the hot path: the SQL is written by hand, the columns and their
conversions come from the models.

An approved agent decision is CPU-bound in Django's ORM *building* its statements (issue 18:
about half of the decision's CPU went to compiling querysets, not to running them). The few
reads on that path are written here as SQL text, and their rows become model instances the
way the ORM makes them (``Model.from_db``, the backend's and each field's converters: SQLite
datetimes, booleans, JSON), so the code after them cannot tell the difference.

Usage::

    key, agent = cols(AgentKey, "k"), cols(Agent, "a")
    row = fetch_row(f"SELECT {key.sql}, {agent.sql} FROM accounts_agentkey k JOIN ... ", [..])
    if row is not None:
        k = key.build(row)              # columns 0 .. len(key) - 1
        k.agent = agent.build(row, len(key))

Only fields of the model's own table are selected (``concrete_fields``, or the ``only`` names);
relations are joined by hand and set on the instances, as above.

Also here: :func:`insert` and the :class:`Write` forms another statement can carry
(``insert_write``, ``update_write``: a decision's refund row and reservation ride on its audit
append), the prepared PostgreSQL cursor (:func:`cursor`), and the C loader for timestamps
(:func:`fast_timestamptz_loader`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC
from functools import cache, lru_cache
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)

Converter = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class Columns(Generic[M]):
    """The select list of ``model`` under table alias ``alias``, and how its values become an
    instance."""

    model: type[M]
    alias: str
    fields: tuple[Field[Any, Any], ...]
    sql: str
    attnames: tuple[str, ...]
    converters: tuple[tuple[tuple[Converter, Any], ...], ...]

    def __len__(self) -> int:
        return len(self.fields)

    def build(self, row: Sequence[Any], start: int = 0) -> M:
        """The instance whose columns start at ``row[start]``, as the ORM would load it."""
        db = _db()
        values = list(row[start : start + len(self.fields)])
        for i, steps in enumerate(self.converters):
            for convert, expression in steps:
                values[i] = convert(values[i], expression, db)
        return self.model.from_db(db.alias, self.attnames, values)


def cols(model: type[M], alias: str, only: tuple[str, ...] | None = None) -> Columns[M]:
    """The columns of ``model`` (all concrete fields, or the primary key and ``only``) selected
    as ``"alias"."column"``, for the default connection's backend."""
    return _cols(model, alias, only, connection.vendor)


@cache
def _cols(model: type[M], alias: str, only: tuple[str, ...] | None, vendor: str) -> Columns[M]:
    fields = tuple(
        f
        for f in model._meta.concrete_fields
        if only is None or f.primary_key or f.name in only or f.attname in only
    )
    quote = connection.ops.quote_name
    converters = []
    for f in fields:
        expression = f.get_col(alias)
        # Field.get_db_converters is Django's (the ORM's compiler calls it), not in the stubs.
        steps = connection.ops.get_db_converters(expression) + f.get_db_converters(connection)  # type: ignore[attr-defined]
        converters.append(tuple((step, expression) for step in steps))
    return Columns(
        model=model,
        alias=alias,
        fields=fields,
        sql=", ".join(f"{quote(alias)}.{quote(f.column)}" for f in fields),
        attnames=tuple(f.attname for f in fields),
        converters=tuple(converters),
    )


def fetch_row(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row ``sql`` answers, or None."""
    with cursor() as c:
        c.execute(sql, params)
        return c.fetchone()


def cursor() -> Any:
    """A cursor of the default connection for the hot path's statements.

    On PostgreSQL each statement run through it is prepared on the connection the first time
    (parsed and planned once; then only bound and run: about half of the database's CPU
    per agent decision, bench/decision_profile.py), connections being persistent
    (``conn_max_age``). Django's wrapper is kept (``execute_wrapper``, its database errors,
    the query log with the statement's values written in); only the driver's cursor binds
    parameters on the server, as prepared statements need. Django turns psycopg's preparing
    off for connection poolers' sake (``prepare_threshold=None``); this sets a threshold no
    other statement reaches, so the ORM's statements stay unprepared (they are bound
    client-side anyway) and only these ask. Behind PgBouncer in transaction mode, use a
    version with protocol-level prepared statements (1.21 or later). Elsewhere a plain cursor.
    """
    db = _db()
    if db.vendor != "postgresql":
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw_connection: Any = db.connection
    if raw_connection.prepare_threshold is None:
        raw_connection.prepare_threshold = _ONLY_WHEN_ASKED
    pg = _postgresql()
    with db.wrap_database_errors:
        raw = pg.preparing(raw_connection)
        # What Django's create_cursor does: timestamps in the connection's time zone when the
        # connection's loader was set up for another.
        loader = raw_connection.adapters.get_loader(pg.timestamptz_oid, pg.text)
        if db.timezone != loader.timezone:
            pg.register_tzloader(db.timezone, raw)
        db.validate_thread_sharing()
        return pg.debug_wrapper(raw, db) if db.queries_logged else CursorWrapper(raw, db)


def fast_timestamptz_loader(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: a new PostgreSQL connection reads ``timestamptz``
    values with psycopg's C loader instead of Django's, where the two give the same value.

    Django reads them with a Python loader (``register_tzloader``: psycopg's pure-Python
    parser, then the connection's time zone put on the result): about 5 µs a value, against
    0.2 µs for psycopg's own loader, which ``psycopg[binary]`` writes in C; an agent decision
    reads a few dozen. Both parse the text PostgreSQL sends in the session's time zone; with
    the session in UTC (Django sets it so, ``ensure_timezone``) and Django's zone UTC
    (``USE_TZ``, no database ``TIME_ZONE``), psycopg's answers in ``datetime.timezone.utc``
    too, which is Django's result exactly (tests/test_sql.py compares them). Any other set-up
    keeps Django's loader. The subclass carries the ``timezone`` Django's ``create_cursor``
    compares with its own, so Django registers nothing over it.
    """
    if connection.vendor != "postgresql" or connection.timezone is not UTC:
        return
    raw = connection.connection
    if raw.info.parameter_status("TimeZone") != "UTC":
        return
    raw.adapters.register_loader("timestamptz", _utc_timestamptz_loader())


@cache
def _utc_timestamptz_loader() -> type:
    from psycopg import adapters
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    fast: Any = adapters.get_loader(_postgresql().timestamptz_oid, Format.TEXT)

    class UtcTimestamptzLoader(Loader):
        # psycopg's C loader cannot be subclassed: this one hands each value to it.
        timezone = UTC

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            # The C loader's bound method, found before the class's on every call.
            self.load = fast(oid, context).load  # type: ignore[method-assign]

        def load(self, data: Any) -> Any:  # pragma: no cover - the instance's is used
            return fast(self.oid, self.connection).load(data)

    return UtcTimestamptzLoader


def _db() -> Any:
    """The default connection's wrapper itself: ``django.db.connection`` is a proxy that
    looks the thread's connection up again on every attribute (a measurable share of these
    statements' CPU)."""
    return connections[DEFAULT_DB_ALIAS]


# How many of the statements run through cursor() psycopg's conversions are kept for (there
# are a few dozen, and IN lists of a few lengths).
_CONVERTED_STATEMENTS = 256

# psycopg prepares a statement after this many runs unless asked: never, in practice.
_ONLY_WHEN_ASKED = 2**31 - 1


@dataclass(frozen=True)
class _PostgreSQL:
    preparing: type
    debug_wrapper: type
    timestamptz_oid: int
    text: Any
    register_tzloader: Callable[[Any, Any], None]
    converted: Any  # the statements' conversions, an lru_cache (its cache_info() for tests)


@cache
def _postgresql() -> _PostgreSQL:
    # Imported here: the PostgreSQL backend module needs psycopg, SQLite set-ups need not.
    from django.db.backends.postgresql.base import (  # type: ignore[attr-defined]  # psycopg 3
        TIMESTAMPTZ_OID,
        ServerBindingCursor,
        register_tzloader,
    )
    from psycopg.pq import Format

    written_once, converted = _written_once_query()

    class PreparingCursor(ServerBindingCursor):
        if written_once is not None:
            _query_cls = written_once

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return super().execute(query, params, **{**kwargs, "prepare": True})

    class PreparedDebugWrapper(CursorDebugWrapper):
        """Logs the statement with its values written in, as for Django's own statements (a
        prepared statement leaves psycopg nothing to show)."""

        def execute(self, sql: Any, params: Any = None) -> Any:
            shown = self.db.ops.compose_sql(sql, params) if params is not None else sql
            with self.debug_sql(shown, None):
                return CursorWrapper.execute(self, sql, params)

    return _PostgreSQL(
        preparing=PreparingCursor,
        debug_wrapper=PreparedDebugWrapper,
        timestamptz_oid=TIMESTAMPTZ_OID,
        text=Format.TEXT,
        register_tzloader=register_tzloader,
        converted=converted,
    )


def placeholders(values: Sized) -> str:
    """``%s, %s, …``, one per value, for an ``IN (…)`` or ``VALUES (…)`` list."""
    return ", ".join(["%s"] * len(values))


def for_update(*aliases: str) -> str:
    """``FOR UPDATE OF …`` where the backend locks rows; nothing on SQLite, whose writers hold
    the whole database (``BEGIN IMMEDIATE``) instead."""
    if not connection.features.has_select_for_update:
        return ""
    if aliases and connection.features.has_select_for_update_of:
        return " FOR UPDATE OF " + ", ".join(connection.ops.quote_name(a) for a in aliases)
    return " FOR UPDATE"


Statement = tuple[str, Sequence[Any]]  # SQL with %s placeholders, and its parameters


@dataclass(frozen=True)
class Carried:
    """A value for another statement to select, so that reading it costs no round trip of its
    own: ``sql`` is a scalar expression (a sub-select) with ``%s`` placeholders, ``params``
    their values."""

    sql: str
    params: tuple[Any, ...]


def insert(obj: M) -> M:
    """INSERT ``obj`` as ``obj.save(force_insert=True)`` would, with a statement written once
    per model: each field's ``pre_save`` (``auto_now_add``…) and ``get_db_prep_save``, the
    auto primary key read back. No signals are sent (Sill connects none to these models).
    A unique or check violation raises ``IntegrityError`` as ``save`` does."""
    meta = obj._meta
    pk_set = obj.pk is not None
    db = _db()
    sql, fields, returning = _insert_sql(type(obj), pk_set, db.vendor)
    values = [f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields]
    with cursor() as c:
        c.execute(sql, values)
        if returning:
            assert meta.auto_field is not None
            value = c.fetchone()[0] if _returns(db) else c.lastrowid
            setattr(obj, meta.auto_field.attname, value)
    _inserted(obj, db)
    return obj


def _inserted(obj: Model, db: Any) -> None:
    obj._state.adding = False
    obj._state.db = db.alias


@dataclass(frozen=True)
class Guard:
    """A value another statement reads alongside its own (the same snapshot), and what must
    hold of it: ``check(value)`` raises if it does not. ``sql`` is one expression, standing
    alone (``SELECT {sql}`` works too), with its own ``params``.

    A decision's policy version must still be the site's active one when its audit append
    reads the chain head: the append then takes the head only if no other append (a policy
    change's included) came in between (``audit.services.append_record``).
    """

    sql: str
    params: tuple[Any, ...]
    check: Callable[[Any], None]


@dataclass(frozen=True)
class Write:
    """An INSERT or UPDATE for another statement to carry, so that it costs no round trip of
    its own (the decision's refund row and reservation ride on its audit append:
    ``audit.services.append_record``).

    ``alone``: the statement by itself. ``given``: the same, writing only if the row source
    ``{source}`` has a row (``INSERT … SELECT … FROM {source}``, ``UPDATE … FROM {source}``),
    for a data-modifying ``WITH`` on PostgreSQL. ``done()`` is called once it ran.
    """

    alone: str
    given: str
    params: tuple[Any, ...]
    done: Callable[[], None] | None = None


def insert_write(obj: Model) -> Write:
    """The INSERT :func:`insert` sends for ``obj``, as a :class:`Write`; ``obj``'s primary key
    must be set (nothing is read back)."""
    return _insert_write(obj, None)(None)


def insert_write_later(obj: Model, field: str) -> Callable[[Any], Write]:
    """:func:`insert_write` for ``obj`` with the value of ``field`` (an attname) given later:
    ``write(value)`` is the :class:`Write` with it. Every other value is prepared now
    (``pre_save``, ``get_db_prep_save``), once: a decision's refund INSERT carries its audit
    record's hash, and an append that lost its race to another builds the record again on
    the new head; only the hash changes, the refund's other values stay as they were."""
    return _insert_write(obj, field)


def _insert_write(obj: Model, late: str | None) -> Callable[[Any], Write]:
    assert obj.pk is not None, "insert_write needs the primary key set"
    db = _db()
    sql, fields, _returning = _insert_sql(type(obj), True, db.vendor)
    values = [f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields if f.attname != late]
    at = next((i for i, f in enumerate(fields) if f.attname == late), None)
    if late is not None and at is None:
        raise ValueError(f"{type(obj).__name__} has no column {late!r}")
    into, _, _ = sql.partition(" VALUES ")
    # Formatted in: the model's table and columns, and placeholders.
    given = f"{into} SELECT {placeholders(fields)} FROM {{source}}"  # noqa: S608

    def write(value: Any) -> Write:
        params = values
        if at is not None:
            params = [*values[:at], fields[at].get_db_prep_save(value, db), *values[at:]]
        return Write(alone=sql, given=given, params=tuple(params), done=lambda: _inserted(obj, db))

    return write


def update_write(table: str, assignments: str, params: Sequence[Any], *, pk: Any) -> Write:
    """``UPDATE table SET assignments WHERE id = pk`` as a :class:`Write` (``assignments``
    written by the caller, its values as ``params``)."""
    quote = connection.ops.quote_name
    return Write(
        # Formatted in: a table and assignments of the caller's, and placeholders.
        alone=f"UPDATE {quote(table)} SET {assignments} WHERE {quote('id')} = %s",  # noqa: S608
        given=(
            f"UPDATE {quote(table)} SET {assignments} FROM {{source}}"  # noqa: S608
            f" WHERE {quote(table)}.{quote('id')} = %s"
        ),
        params=(*params, pk),
    )


def _returns(conn: Any) -> bool:
    return bool(conn.features.can_return_columns_from_insert)


@cache
def _insert_sql(
    model: type[Model], pk_set: bool, vendor: str
) -> tuple[str, tuple[Field[Any, Any], ...], bool]:
    meta = model._meta
    fields = tuple(f for f in meta.local_concrete_fields if pk_set or f is not meta.auto_field)
    returning = not pk_set and meta.auto_field is not None
    quote = connection.ops.quote_name
    # Formatted in: the model's table and column names, and placeholders.
    sql = "INSERT INTO {} ({}) VALUES ({})".format(  # noqa: S608
        quote(meta.db_table),
        ", ".join(quote(f.column) for f in fields),
        placeholders(fields),
    )
    if returning and _returns(connection):
        assert meta.auto_field is not None
        sql += f" RETURNING {quote(meta.auto_field.column)}"
    return sql, fields, returning


def _written_once_query() -> tuple[type | None, Any]:
    """psycopg's query class for the statements run here, and its conversion cache; (None,
    None) when this psycopg lacks the internals it builds on (its own class is then used:
    the same statements, each converted on every run past psycopg's cache limits).
    tests/test_sql.py fails if that happens, so an upgrade shows it."""
    try:
        from psycopg._queries import PostgresQuery, _query2pg_nocache
    except ImportError:  # pragma: no cover - another psycopg
        return None, None

    @lru_cache(maxsize=_CONVERTED_STATEMENTS)
    def converted(query: str, encoding: str) -> Any:
        return _query2pg_nocache(query.encode(encoding), encoding)

    class WrittenOnceQuery(PostgresQuery):
        """psycopg rewrites each statement's ``%s`` into ``$n`` with a regular expression and
        remembers the result only for statements under 4 kB and 50 parameters (against
        ORMs' ever-different multi-row INSERTs). The statements run here are written once in
        Sill's code, so every one is remembered, the audit append's (which carries the
        decision's refund INSERT: past both limits) included: it was rewritten on every
        decision (about 5 % of a decision's CPU, bench/decision_profile.py)."""

        def convert(self, query: Any, vars: Any) -> None:
            if vars is None or not isinstance(query, str):
                return super().convert(query, vars)
            self.query, self._want_formats, self._order, self._parts = converted(
                query, self._tx.encoding
            )
            self.dump(vars)
            return None

    return WrittenOnceQuery, converted
