"""sill.sql: hand-written reads give the instances the ORM gives, writes store what ``save``
stores, on SQLite and PostgreSQL alike (the converters are the backend's: SQLite datetimes are
text, booleans integers, JSON text)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from refunds.models import Mandate
from sill.accounts.models import Agent, Site
from sill.rails.models import RailAccount
from sill.sql import cols, fetch_row, for_update, insert

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
