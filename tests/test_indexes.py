"""The foreign keys whose index of their own was dropped (refunds 0018, audit 0011) are still
the first column of another index, so lookups and deletions by them stay indexed; the
``varchar_pattern_ops`` twins of the money path's keys (refunds 0019, audit 0012, orders 0006)
are gone, and the migrations' undo makes them as Django names them."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

from sill import indexes

pytestmark = pytest.mark.django_db

LED_BY_COMPOSITES = [
    ("refunds", "mandate", "site"),
    ("refunds", "mandate", "agent"),
    ("refunds", "refund", "site"),
    ("refunds", "refund", "agent"),
    ("audit", "auditrecord", "site"),
    ("audit", "audittreenode", "site"),
]


@pytest.mark.parametrize(("app", "model_name", "field_name"), LED_BY_COMPOSITES)
def test_each_key_leads_an_index_and_has_none_alone(app, model_name, field_name) -> None:
    model = apps.get_model(app, model_name)
    column = model._meta.get_field(field_name).column
    with connection.cursor() as cursor:
        indexes = [
            info
            for info in connection.introspection.get_constraints(
                cursor, model._meta.db_table
            ).values()
            if info["index"] or info["unique"]
        ]
    assert not [i for i in indexes if i["columns"] == [column] and not i["unique"]]
    assert [i for i in indexes if i["columns"][:1] == [column] and len(i["columns"]) > 1]


PATTERN_TWINS_DROPPED = {
    "refunds": [("refund", "id"), ("refund", "order"), ("refund", "charge")],
    "audit": [("auditchainhead", "site")],
    "orders": [
        ("order", "id"), ("order", "site"), ("charge", "id"), ("charge", "order"),
        ("lineitem", "order"),
    ],
}  # fmt: skip


def _pattern_twins(app: str, model_name: str, field_name: str) -> list[str]:
    model = apps.get_model(app, model_name)
    column = model._meta.get_field(field_name).column
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = %s AND indexdef LIKE %s",
            [model._meta.db_table, f"%({column} varchar_pattern_ops)"],
        )
        return [name for (name,) in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.parametrize("app", sorted(PATTERN_TWINS_DROPPED))
def test_the_money_paths_keys_have_no_pattern_twins_and_undo_restores_them(app) -> None:
    fields = PATTERN_TWINS_DROPPED[app]
    assert not [f for f in fields if _pattern_twins(app, *f)]
    # The other varchar keys keep theirs (the lookup finds what Django makes).
    assert _pattern_twins("refunds", "refundreason", "path")
    drop, undo = indexes.dropping_pattern_twins(app, fields)
    # DDL is transactional on PostgreSQL: the test's rollback puts the schema back.
    with connection.schema_editor(atomic=False) as editor:
        undo(apps, editor)
    restored = {f: _pattern_twins(app, *f) for f in fields}
    assert all(len(names) == 1 and names[0].endswith("_like") for names in restored.values())
    with connection.schema_editor(atomic=False) as editor:
        drop(apps, editor)
    assert not [f for f in fields if _pattern_twins(app, *f)]
