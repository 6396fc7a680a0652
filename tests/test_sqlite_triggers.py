"""Triggers a migration creates on SQLite survive every later migration.

SQLite rebuilds a table to alter one of its columns, and the rebuild drops the table's
triggers; Django does not put them back. The suite runs on PostgreSQL in CI, where the
triggers survive, so this migrates a SQLite database from nothing in a process of its own
and looks for each trigger the migrations define for SQLite (refunds/0017's agent totals)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from importlib import import_module
from pathlib import Path

from tests.worker import ROOT

NOT_PASSED = ("DATABASE_URL", "REDIS_URL", "SILL_BROKER_URL", "SILL_BROKER_DIR", "SILL_DATA_DIR")


def _sqlite_triggers_defined() -> set[str]:
    totals = import_module("refunds.migrations.0017_agent_refund_totals")
    return {re.search(r"CREATE TRIGGER (\w+)", s).group(1) for s in totals.SQLITE}  # type: ignore[union-attr]


def test_a_sqlite_database_migrated_from_nothing_has_every_trigger(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    env.update({"SILL_DATA_DIR": str(tmp_path), "DEBUG": "1"})
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    with sqlite3.connect(tmp_path / "sill.sqlite3") as db:
        found = {
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
    defined = _sqlite_triggers_defined()
    assert len(defined) == 3
    assert defined <= found, f"dropped by a later table rebuild: {sorted(defined - found)}"
