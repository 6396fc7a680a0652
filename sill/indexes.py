"""Migration helper: drop the index Django made for a foreign key alone, and nothing else.

``AlterField(db_index=False)`` on a foreign key drops the constraint, drops the index and
adds the constraint back, which on PostgreSQL checks every row of the table again while
holding off its writers: minutes of refused refunds on a large audit log. Dropping the index
is all that changes. Migrations pair this with the ``AlterField`` as state only
(``SeparateDatabaseAndState``).
"""

from __future__ import annotations

from typing import Any


def drop_single_column_indexes(schema_editor: Any, table: str, column: str) -> None:
    """Drop the non-unique indexes on ``table`` of ``column`` alone (PostgreSQL's
    ``varchar_pattern_ops`` twin included); indexes of several columns stay."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    for name, info in sorted(constraints.items()):
        alone = info["columns"] == [column]
        if alone and info["index"] and not info["unique"] and not info["primary_key"]:
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def restore(schema_editor: Any, model: Any, field_name: str) -> None:
    """Undo: the indexes Django makes for a foreign key with ``db_index=True``, named as it
    names them (its schema editor's own builders)."""
    field = model._meta.get_field(field_name)
    schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))
    like = getattr(schema_editor, "_create_like_index_sql", None)  # PostgreSQL's
    if like is not None and (statement := like(model, field)) is not None:
        schema_editor.execute(statement)


def dropping(app_label: str, fields: list[tuple[str, str]]) -> tuple[Any, Any]:
    """The forward and backward functions of a ``RunPython`` dropping (and restoring) the
    own indexes of ``fields``, (model name, field name) pairs of ``app_label``."""

    def drop(apps: Any, schema_editor: Any) -> None:
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            column = model._meta.get_field(field_name).column
            drop_single_column_indexes(schema_editor, model._meta.db_table, column)

    def undo(apps: Any, schema_editor: Any) -> None:
        for model_name, field_name in fields:
            restore(schema_editor, apps.get_model(app_label, model_name), field_name)

    return drop, undo


def dropping_pattern_twins(app_label: str, fields: list[tuple[str, str]]) -> tuple[Any, Any]:
    """The forward and backward functions of a ``RunPython`` dropping (and restoring) the
    ``varchar_pattern_ops`` index PostgreSQL gets beside the index of each varchar key in
    ``fields``, (model name, field name) pairs of ``app_label``.

    Django makes that twin for ``LIKE 'prefix%'`` lookups; Sill's ids and keys are only ever
    compared whole, so the twin is written on every INSERT and read by nothing. Other
    databases have no twins: nothing to do there.
    """

    def drop(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            column = model._meta.get_field(field_name).column
            with schema_editor.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                    " AND tablename = %s AND indexdef LIKE %s",
                    [model._meta.db_table, f"%USING btree ({column} varchar_pattern_ops)"],
                )
                names = [name for (name,) in cursor.fetchall()]
            for name in names:
                schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")

    def undo(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            statement = schema_editor._create_like_index_sql(
                model, model._meta.get_field(field_name)
            )
            if statement is not None:
                schema_editor.execute(statement)

    return drop, undo
