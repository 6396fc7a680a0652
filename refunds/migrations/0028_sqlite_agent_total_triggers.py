"""The agent refund totals' triggers again, on SQLite, and the totals counted afresh.

SQLite cannot alter a column in place: Django rebuilds the table (a new one, the rows copied,
the old one dropped), and dropping a table drops its triggers. Migrations 0025, 0026 and 0027
rebuilt ``refunds_refund`` that way, so from 0025 on a SQLite database kept no agent totals:
every decision read the agent's refunds today as none, and the agent's daily cap and any rule
on ``refundAgentTotalTodayUsd`` never saw an earlier refund. PostgreSQL alters tables in place
and keeps its triggers; nothing is done there. tests/test_sqlite_triggers.py migrates a SQLite
database from nothing and fails when a later rebuild drops them again.
"""

from importlib import import_module

from django.db import migrations

totals = import_module("refunds.migrations.0017_agent_refund_totals")


def reinstall(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "sqlite":
        return
    create, backfill, drop = totals.SQLITE, totals.SQLITE_BACKFILL, totals.SQLITE_DROP
    totals._run(connection, drop)
    totals._run(connection, create)
    totals.refill(connection, backfill)


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0027_database_defaults"),
    ]

    operations = [
        migrations.RunPython(reinstall, migrations.RunPython.noop),
    ]
