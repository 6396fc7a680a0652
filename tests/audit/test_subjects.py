"""Records carry the refund and order they are about; ``records_about`` finds them exactly.

The subject columns are an index into the payload, not part of it: hashes, signatures and the
exported lines are the same as before they existed, and the backfill migration leaves every
chain verifying.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext

from audit import chain
from audit.checkpoints import origin_for
from audit.models import AuditKind, AuditLogImmutable, AuditRecord
from audit.selectors import chain_verification, export_lines, records_about
from audit.services import append_record
from sill.accounts.models import Agent, Site
from sill.orders.models import Order
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
TABLE = AuditRecord._meta.db_table
BACKFILL = "0004_backfill_record_subject"


def append(site: Site, kind: str = AuditKind.SETTLEMENT, **body: Any) -> AuditRecord:
    with transaction.atomic():
        return append_record(site=site, kind=kind, body=body)


def seqs(records: Any) -> list[int]:
    return [r.seq for r in records]


def test_it_sets_the_subject_from_the_body(site: Site) -> None:
    record = append(site, refund_id="rf_1", order_id="ord_1", amount_minor=8900)
    stored = AuditRecord.objects.get(pk=record.pk)
    assert (stored.subject_refund_id, stored.subject_order_id) == ("rf_1", "ord_1")
    # The payload is exactly what it was before the columns existed: the body, nothing more.
    assert json.loads(stored.payload)["body"] == {
        "refund_id": "rf_1",
        "order_id": "ord_1",
        "amount_minor": 8900,
    }
    assert "subject" not in stored.payload


def test_it_leaves_the_subject_empty_when_the_body_names_none(site: Site) -> None:
    policy = append(site, AuditKind.POLICY_CHANGE, version="v2")
    charge = append(site, AuditKind.CHARGE, order_id="ord_1", charge_id="ch_1")
    odd = append(site, refund_id=None, order_id=12)
    too_long = append(site, refund_id="rf_" + "x" * 40)
    nested = append(site, AuditKind.REASON_CHANGE, reasons=[{"refund_id": "rf_1"}])

    rows = AuditRecord.objects.filter(site=site).order_by("seq")
    assert [(r.subject_refund_id, r.subject_order_id) for r in rows] == [
        ("", ""),
        ("", "ord_1"),
        ("", ""),
        ("", ""),
        ("", ""),
    ]
    assert [policy.seq, charge.seq, odd.seq, too_long.seq, nested.seq] == [1, 2, 3, 4, 5]


def test_it_finds_exactly_one_refunds_records(site: Site, other_site: Site) -> None:
    escalated = append(site, AuditKind.ESCALATED, refund_id="rf_1", order_id="ord_1")
    append(site, AuditKind.ESCALATED, refund_id="rf_10", order_id="ord_10")  # rf_1 is a prefix
    append(site, AuditKind.REASON_CHANGE, reasons=[{"refund_id": "rf_1"}])  # only nested
    append(other_site, AuditKind.ESCALATED, refund_id="rf_1", order_id="ord_1")
    settled = append(site, refund_id="rf_1", order_id="ord_1")
    charge = append(site, AuditKind.CHARGE, order_id="ord_1")

    assert seqs(records_about(site=site, refund_id="rf_1")) == [escalated.seq, settled.seq]
    assert seqs(records_about(site=site, refund_id="rf_")) == []
    assert seqs(records_about(site=site, order_id="ord_1")) == [
        escalated.seq,
        settled.seq,
        charge.seq,
    ]
    assert seqs(records_about(site=site, refund_id="rf_1", order_id="ord_10")) == []
    assert seqs(records_about(site=other_site, refund_id="rf_1")) == [1]


def test_it_refuses_a_lookup_about_nothing(site: Site) -> None:
    with pytest.raises(ValueError):
        records_about(site=site)


def test_the_subject_is_append_only_too(site: Site) -> None:
    record = append(site, refund_id="rf_1")
    with pytest.raises(AuditLogImmutable):
        AuditRecord.objects.filter(pk=record.pk).update(subject_refund_id="rf_2")
    record.subject_refund_id = "rf_2"
    with pytest.raises(AuditLogImmutable):
        record.save()


# --- the backfill -------------------------------------------------------------------------


def backfill_with_historical_models() -> None:
    """Run the data migration's function against the models as they were at that migration."""
    loader = MigrationLoader(connection)
    apps = loader.project_state(("audit", BACKFILL)).apps
    module = importlib.import_module(f"audit.migrations.{BACKFILL}")
    module.backfill(apps, connection.schema_editor())


def build_mixed_chain(site: Site) -> None:
    append(site, AuditKind.ESCALATED, refund_id="rf_1", order_id="ord_1", amount_minor=8900)
    append(site, AuditKind.CHARGE, order_id="ord_2", amount_minor=100)
    append(site, AuditKind.POLICY_CHANGE, version="v2")
    append(site, refund_id="rf_1", order_id="ord_1", amount_minor=8900, currency="USD")


def run_standalone(tmp_path: Path, export: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "verify_export.py"
    shutil.copy(ROOT / "audit" / "verify_export.py", script)
    return subprocess.run(
        [sys.executable, "-I", str(script), str(export)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_backfill_fills_older_records_and_every_chain_still_verifies(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    build_mixed_chain(site)
    build_mixed_chain(other_site)
    expected = list(
        AuditRecord.objects.order_by("pk").values_list(
            "pk", "subject_refund_id", "subject_order_id"
        )
    )
    lines_before = list(export_lines(site))
    # Records written before the columns existed: empty subjects (raw SQL, past the guard).
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET subject_refund_id = '', subject_order_id = ''")
    assert not records_about(site=site, refund_id="rf_1").exists()

    backfill_with_historical_models()

    after = AuditRecord.objects.order_by("pk").values_list(
        "pk", "subject_refund_id", "subject_order_id"
    )
    assert list(after) == expected
    assert seqs(records_about(site=site, refund_id="rf_1")) == [1, 4]
    assert chain_verification(site).ok and chain_verification(other_site).ok
    assert list(export_lines(site)) == lines_before

    path = tmp_path / "export.jsonl"
    call_command("audit", "export", "--site", site.pk, "--output", str(path))
    result = run_standalone(tmp_path, path)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[0]
        == f"OK: 4 records of log {origin_for(site.pk)}, matching their signed checkpoint"
    )
    call_command("audit", "verify")  # raises CommandError on any bad chain


def test_the_subject_columns_stay_out_of_the_export(site: Site) -> None:
    record = append(site, refund_id="rf_1", order_id="ord_1")
    line = json.loads(list(export_lines(site))[1])
    assert "subject_refund_id" not in line and "subject_order_id" not in line
    assert line["hash"] == chain.record_hash(line["prev_hash"], record.payload.encode())


# --- the held refund's page ---------------------------------------------------------------


def _detail_queries(client: Any, refund_id: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(f"/held/{refund_id}/")
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_the_held_page_reads_its_records_in_one_query(
    client_for: Callable[[str], Any],
    make_order: Callable[..., Order],
    agent: Agent,
    site: Site,
) -> None:
    client = client_for("admin")
    refund = hold_refund(order=make_order(), agent=agent)
    before, body = _detail_queries(client, refund.id)
    (escalated,) = records_about(site=site, refund_id=refund.id)
    assert f"#{escalated.seq} ·" in body

    # More records about it, and some about a refund whose id it is a prefix of.
    for _ in range(5):
        append(site, AuditKind.REVIEW, refund_id=refund.id, order_id=refund.order_id)
        append(site, AuditKind.REVIEW, refund_id=refund.id + "0", order_id="ord_other")
    after, body = _detail_queries(client, refund.id)

    assert after == before
    shown = [r.seq for r in records_about(site=site, refund_id=refund.id)]
    assert len(shown) == 6
    for seq in shown:
        assert f"#{seq} ·" in body
    hidden = AuditRecord.objects.filter(site=site, subject_refund_id=refund.id + "0")
    for record in hidden:
        assert f"#{record.seq} ·" not in body


def test_verify_notices_a_subject_column_changed_behind_the_chain(site):
    """The subject columns are not hashed; verify checks them against the signed body."""
    from django.db import connection, transaction

    from audit.selectors import chain_verification
    from audit.services import append_record

    with transaction.atomic():
        append_record(site=site, kind="settlement", body={"refund_id": "rf_hidden", "amount": 1})
    assert chain_verification(site).ok
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_auditrecord SET subject_refund_id = '' WHERE site_id = %s", [site.pk]
        )
    result = chain_verification(site)
    assert not result.ok and "subject_refund_id" in result.problem
