"""A column a migration adds to an existing table has a database default or allows null, so a
process still running the old code (during an upgrade, or after a rollback of the code alone)
can go on inserting rows that do not name it. README "Upgrading" says so.

Columns added before ``CUT_OFF`` got their database defaults afterwards (the
``*_database_defaults`` migrations); from the cut-off on, the ``AddField`` itself must carry
``db_default`` (or ``null=True``), or the migration that adds the column breaks old inserts
until the later one runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField, CreateModel
from django.db.models import NOT_PROVIDED, Field

# The last migration of each app whose AddFields were given database defaults later. An app
# not named here (a new one) is checked from its first migration.
CUT_OFF = {
    "accounts": "0017_database_defaults",
    "audit": "0016_database_defaults",
    "orders": "0012_database_defaults",
    "policies": "0001_initial",
    "rails": "0012_database_defaults",
    "refunds": "0027_database_defaults",
}

Added = tuple[str, str, str, str]  # app label, migration, model, field


def sills_apps() -> set[str]:
    base = Path(settings.BASE_DIR).resolve()
    return {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).resolve().is_relative_to(base)
        and ".venv" not in Path(config.path).resolve().relative_to(base).parts
    }


def breaks_old_inserts(field: Field) -> bool:
    return not field.null and field.db_default is NOT_PROVIDED and not field.many_to_many


def columns_added_to_existing_tables(loader: MigrationLoader) -> Iterator[tuple[Added, Field]]:
    ours = sills_apps()
    for app, name in sorted(loader.disk_migrations):
        if app not in ours:
            continue
        migration = loader.disk_migrations[app, name]
        created = {op.name_lower for op in migration.operations if isinstance(op, CreateModel)}
        for op in migration.operations:
            if isinstance(op, AddField) and op.model_name_lower not in created:
                yield (app, name, op.model_name_lower, op.name), op.field


@pytest.fixture(scope="module")
def loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def test_it_finds_sills_apps() -> None:
    assert {"refunds", "accounts", "orders", "rails", "audit", "policies"} <= sills_apps()
    assert "django_celery_beat" not in sills_apps()


def test_it_adds_no_column_without_a_database_default_after_the_cut_off(loader) -> None:
    late = [
        added
        for added, field in columns_added_to_existing_tables(loader)
        if added[1] > CUT_OFF.get(added[0], "") and breaks_old_inserts(field)
    ]
    assert late == [], "add these with db_default= (and the same default=), or null=True"


def added_without_default_and_still_there(loader: MigrationLoader) -> Iterator[tuple[Added, Field]]:
    """Each column added without a database default that the models still have, with the
    field as the migrations leave it now."""
    state = loader.project_state()
    for (app, name, model, field_name), field in columns_added_to_existing_tables(loader):
        fields = state.models[app, model].fields if (app, model) in state.models else {}
        if breaks_old_inserts(field) and field_name in fields:
            yield (app, name, model, field_name), fields[field_name]


def test_it_gave_every_column_added_before_the_cut_off_a_database_default(loader) -> None:
    missing = [
        added
        for added, now in added_without_default_and_still_there(loader)
        if breaks_old_inserts(now)
    ]
    assert missing == []


@pytest.mark.django_db
def test_it_has_those_defaults_in_the_database(loader) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("introspects PostgreSQL's catalogue")
    added = set()
    for (app, _name, model, field_name), _now in added_without_default_and_still_there(loader):
        meta = apps.get_model(app, model)._meta
        added.add((meta.db_table, meta.get_field(field_name).column))
    assert len(added) > 30
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND is_nullable = 'NO'"
            " AND column_default IS NULL"
        )
        without_default = set(cursor.fetchall())
    assert sorted(added & without_default) == []
