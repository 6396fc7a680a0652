"""Which unique constraint an ``IntegrityError`` reports, on PostgreSQL and on SQLite.

PostgreSQL names it: psycopg's ``diag.constraint_name`` (a conditional ``UniqueConstraint`` is
a unique index of the same name). SQLite does not: its message names the table's columns
(``UNIQUE constraint failed: refunds_mandate.agent_id, refunds_mandate.nonce``), or the index
for one on expressions (``UNIQUE constraint failed: index 'name'``). There a constraint is
recognised by its table and columns, which tells it from the table's other unique
constraints as long as none of them has the same columns: :func:`violated` refuses a
constraint it could not tell apart, rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from django.db import IntegrityError
from django.db.models import Model, UniqueConstraint

_SQLITE_UNIQUE = re.compile(
    r"\AUNIQUE constraint failed: (?:index '(?P<index>[^']+)'|(?P<columns>.+))\Z"
)


def violated(exc: IntegrityError, model: type[Model], name: str) -> bool:
    """Whether ``exc`` reports a violation of ``model``'s unique constraint ``name``.

    ``name`` must be one of ``model``'s ``UniqueConstraint`` s (``LookupError`` otherwise), so
    a constraint renamed in the model cannot silently stop matching.
    """
    columns = _columns(model, name)
    diag = getattr(exc.__cause__, "diag", None)
    if diag is not None:  # psycopg
        return bool(diag.constraint_name == name)
    found = _SQLITE_UNIQUE.match(str(exc))
    if found is None:
        return False
    if found["index"] is not None:
        return bool(found["index"] == name)
    return tuple(found["columns"].split(", ")) == columns


@cache
def _columns(model: type[Model], name: str) -> tuple[str, ...]:
    """``table.column`` of each field of ``model``'s unique constraint ``name``, as SQLite's
    message lists them (none for a constraint on expressions: SQLite names its index)."""
    meta = model._meta
    unique = [c for c in meta.constraints if isinstance(c, UniqueConstraint)]
    constraint = next((c for c in unique if c.name == name), None)
    if constraint is None:
        raise LookupError(f"{meta.label} has no unique constraint {name!r}")
    column_of = {f.name: f"{meta.db_table}.{f.column}" for f in meta.local_fields}

    def columns(fields: Iterable[str]) -> tuple[str, ...]:
        return tuple(column_of[f] for f in fields)

    mine = columns(constraint.fields)
    others = [columns(c.fields) for c in unique if c is not constraint]
    others += [columns([f.name]) for f in meta.local_fields if f.unique]
    others += [columns(fields) for fields in meta.unique_together]
    if mine and mine in others:
        raise LookupError(
            f"{meta.label}.{name} has the columns of another unique constraint, which SQLite's "
            "message cannot tell apart from it"
        )
    return mine
