"""The agents' live refunds by quarter-hour (``refunds.models.AgentRefundTotal``), kept by
triggers on ``refunds_refund`` and filled from the refunds already there.

The SQL is written here, not imported, so that this migration keeps doing what it did when
later code changes. Live means ``refunds.models.LIVE_STATUSES`` (tests/policies/
test_agent_totals.py fails if the two ever differ). A refund counts its ``amount_minor``
when it has an agent and a live status; an update changes the totals only when what the
row counts changes (its agent, currency, creation time or counted amount).
"""

# ruff: noqa: S608  (the statements are formatted from this file's own constants only)

import django.db.models.deletion
from django.db import migrations, models

LIVE = "'held', 'processing', 'needs_attention', 'succeeded'"

POSTGRESQL = [
    f"""CREATE FUNCTION refunds_agent_total_kept() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
            VALUES (NEW.agent_id, floor(extract(epoch FROM NEW.created_at) / 900)::bigint,
                    NEW.currency, NEW.amount_minor, 'inserted')
            ON CONFLICT (agent_id, period, currency) WHERE kind = 'inserted'
            DO UPDATE SET amount_minor =
                refunds_agentrefundtotal.amount_minor + EXCLUDED.amount_minor;
            RETURN NULL;
        END IF;
        IF OLD.agent_id IS NOT NULL AND OLD.status IN ({LIVE}) AND OLD.amount_minor <> 0 THEN
            INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
            VALUES (OLD.agent_id, floor(extract(epoch FROM OLD.created_at) / 900)::bigint,
                    OLD.currency, -OLD.amount_minor, 'changed');
        END IF;
        IF NEW.agent_id IS NOT NULL AND NEW.status IN ({LIVE}) AND NEW.amount_minor <> 0 THEN
            INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
            VALUES (NEW.agent_id, floor(extract(epoch FROM NEW.created_at) / 900)::bigint,
                    NEW.currency, NEW.amount_minor, 'changed');
        END IF;
        RETURN NULL;
    END
    $$""",
    f"""CREATE TRIGGER refunds_agent_total_inserted AFTER INSERT ON refunds_refund
    FOR EACH ROW
    WHEN (NEW.agent_id IS NOT NULL AND NEW.status IN ({LIVE}) AND NEW.amount_minor <> 0)
    EXECUTE FUNCTION refunds_agent_total_kept()""",
    f"""CREATE TRIGGER refunds_agent_total_changed AFTER UPDATE ON refunds_refund
    FOR EACH ROW
    WHEN ((OLD.agent_id, OLD.currency, OLD.created_at,
           CASE WHEN OLD.status IN ({LIVE}) THEN OLD.amount_minor ELSE 0 END)
          IS DISTINCT FROM
          (NEW.agent_id, NEW.currency, NEW.created_at,
           CASE WHEN NEW.status IN ({LIVE}) THEN NEW.amount_minor ELSE 0 END))
    EXECUTE FUNCTION refunds_agent_total_kept()""",
]
POSTGRESQL_BACKFILL = f"""
    INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
    SELECT agent_id, floor(extract(epoch FROM created_at) / 900)::bigint, currency,
           SUM(amount_minor), 'inserted'
    FROM refunds_refund
    WHERE agent_id IS NOT NULL AND status IN ({LIVE}) AND amount_minor <> 0
    GROUP BY 1, 2, 3"""
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS refunds_agent_total_changed ON refunds_refund",
    "DROP TRIGGER IF EXISTS refunds_agent_total_inserted ON refunds_refund",
    "DROP FUNCTION IF EXISTS refunds_agent_total_kept()",
]

# SQLite stores datetimes as UTC text ('YYYY-MM-DD HH:MM:SS[.ffffff]'); strftime('%s')
# reads the whole seconds as UTC seconds. The fraction is cut off first: SQLite's date
# functions round to milliseconds, which would put 03:59:59.9999 in 04:00's quarter-hour.
_PERIOD = "CAST(strftime('%s', substr({row}.created_at, 1, 19)) AS INTEGER) / 900"
_SQLITE_COUNTS = "(CASE WHEN {row}.status IN (" + LIVE + ") THEN {row}.amount_minor ELSE 0 END)"
_SQLITE_CHANGED = " OR ".join(
    [
        "OLD.agent_id IS NOT NEW.agent_id",
        "OLD.currency IS NOT NEW.currency",
        "OLD.created_at IS NOT NEW.created_at",
        _SQLITE_COUNTS.format(row="OLD") + " IS NOT " + _SQLITE_COUNTS.format(row="NEW"),
    ]
)
SQLITE = [
    f"""CREATE TRIGGER refunds_agent_total_inserted AFTER INSERT ON refunds_refund
    WHEN NEW.agent_id IS NOT NULL AND NEW.status IN ({LIVE}) AND NEW.amount_minor <> 0
    BEGIN
        INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
        VALUES (NEW.agent_id, {_PERIOD.format(row="NEW")}, NEW.currency, NEW.amount_minor,
                'inserted')
        ON CONFLICT (agent_id, period, currency) WHERE kind = 'inserted'
        DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor;
    END""",
    f"""CREATE TRIGGER refunds_agent_total_left AFTER UPDATE ON refunds_refund
    WHEN ({_SQLITE_CHANGED}) AND OLD.agent_id IS NOT NULL AND OLD.status IN ({LIVE})
        AND OLD.amount_minor <> 0
    BEGIN
        INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
        VALUES (OLD.agent_id, {_PERIOD.format(row="OLD")}, OLD.currency, -OLD.amount_minor,
                'changed');
    END""",
    f"""CREATE TRIGGER refunds_agent_total_entered AFTER UPDATE ON refunds_refund
    WHEN ({_SQLITE_CHANGED}) AND NEW.agent_id IS NOT NULL AND NEW.status IN ({LIVE})
        AND NEW.amount_minor <> 0
    BEGIN
        INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
        VALUES (NEW.agent_id, {_PERIOD.format(row="NEW")}, NEW.currency, NEW.amount_minor,
                'changed');
    END""",
]
SQLITE_BACKFILL = f"""
    INSERT INTO refunds_agentrefundtotal (agent_id, period, currency, amount_minor, kind)
    SELECT agent_id, {_PERIOD.format(row="refunds_refund")}, currency, SUM(amount_minor),
           'inserted'
    FROM refunds_refund
    WHERE agent_id IS NOT NULL AND status IN ({LIVE}) AND amount_minor <> 0
    GROUP BY 1, 2, 3"""
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS refunds_agent_total_entered",
    "DROP TRIGGER IF EXISTS refunds_agent_total_left",
    "DROP TRIGGER IF EXISTS refunds_agent_total_inserted",
]


def _statements(vendor: str) -> tuple[list[str], str, list[str]]:
    if vendor == "postgresql":
        return POSTGRESQL, POSTGRESQL_BACKFILL, POSTGRESQL_DROP
    if vendor == "sqlite":
        return SQLITE, SQLITE_BACKFILL, SQLITE_DROP
    raise NotImplementedError(f"agent refund totals need triggers written for {vendor}")


def install(apps, schema_editor) -> None:
    """Triggers first, then the refunds already there: on PostgreSQL creating a trigger waits
    for the table's writers in flight and holds new ones off until this migration commits,
    so every refund is counted once, by the backfill or by a trigger."""
    create, backfill, _ = _statements(schema_editor.connection.vendor)
    _run(schema_editor.connection, create)
    refill(schema_editor.connection, backfill)


def refill(connection, backfill: str | None = None) -> None:
    """Count every refund afresh: the ``inserted`` rows from the refunds as they are now."""
    backfill = backfill or _statements(connection.vendor)[1]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM refunds_agentrefundtotal")
        cursor.execute(backfill)


def uninstall(apps, schema_editor) -> None:
    _run(schema_editor.connection, _statements(schema_editor.connection.vendor)[2])


def _run(connection, statements: list[str]) -> None:
    # A cursor without parameters: schema_editor.execute() would read SQLite's
    # strftime('%s') as a placeholder.
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_seal_slack_webhook"),
        ("refunds", "0016_agent_day_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="AgentRefundTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("period", models.BigIntegerField()),
                ("currency", models.CharField(max_length=3)),
                ("amount_minor", models.BigIntegerField()),
                (
                    "kind",
                    models.CharField(
                        choices=[("inserted", "Inserted"), ("changed", "Changed")], max_length=8
                    ),
                ),
                (
                    "agent",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.agent",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["agent", "period"], name="agent_total_period_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("kind", "inserted")),
                        fields=("agent", "period", "currency"),
                        name="agent_total_one_inserted_row",
                    )
                ],
            },
        ),
        migrations.RunPython(install, uninstall),
    ]
