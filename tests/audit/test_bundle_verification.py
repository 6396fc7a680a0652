"""What the standalone verifier asks of an evidence bundle beyond its records and proofs (a
whole agent refund's bundle: tests/refunds/test_evidence_bundle.py): the mandate a decision
names comes with it, and an edited record is a problem listed, never a crash."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from audit import bundles, checkpoints, verify_export
from audit.models import AuditKind
from audit.services import append_record
from sill.accounts.models import Site
from tests.audit.test_tamper import export, run_standalone

pytestmark = pytest.mark.django_db

MANDATE = b'{"signed":{"mandate_id":"mnd_1","max_amount":"89.00"},"envelope":{}}'


def bundle_of(site: Site, body: dict[str, Any]) -> dict[str, Any]:
    """The bundle of the refund ``body`` is about, its one record appended with ``body``."""
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.APPROVED, body=body)
    return bundles.refund_bundle(site=site, refund_id=body["refund_id"])


@pytest.fixture
def agent_bundle(site: Site) -> dict[str, Any]:
    """A decision naming its mandate's SHA-256, and the mandate's bytes beside it."""
    bundle = bundle_of(
        site,
        {
            "refund_id": "rf_agent",
            "amount_minor": 8900,
            "currency": "USD",
            "mandate_sha256": hashlib.sha256(MANDATE).hexdigest(),
        },
    )
    bundle["mandate"] = {"bytes_b64": base64.b64encode(MANDATE).decode("ascii")}
    assert verify_export.verify_bundle(bundle, None, None) == (1, [])
    return bundle


@pytest.mark.parametrize("removed", ["set to null", "key dropped"])
def test_a_decision_naming_a_mandate_needs_it_in_the_bundle(
    agent_bundle: dict[str, Any], removed: str
) -> None:
    if removed == "set to null":
        agent_bundle["mandate"] = None
    else:
        del agent_bundle["mandate"]
    _, problems = verify_export.verify_bundle(agent_bundle, None, None)
    assert problems == [
        "FAILED at the mandate: a decision record names its SHA-256, but the bundle does not "
        "carry it"
    ]


@pytest.mark.parametrize(
    "prev_hash",
    [5, None, ["0" * 64], "\u00e9" * 64, "0" * 63],
    ids=["a number", "null", "a list", "not ascii", "63 digits"],
)
def test_a_malformed_prev_hash_is_a_problem_not_a_crash(site: Site, prev_hash: object) -> None:
    bundle = bundle_of(site, {"refund_id": "rf_1"})
    assert verify_export.verify_bundle(bundle, None, None) == (1, [])  # names no mandate
    bundle["records"][0]["prev_hash"] = prev_hash
    _, problems = verify_export.verify_bundle(bundle, None, None)
    assert problems == ["FAILED at seq 1: prev_hash is not 64 lowercase hex digits"]


@pytest.mark.parametrize("kind", [AuditKind.REFUND_REVERSED, AuditKind.NEEDS_ATTENTION])
def test_a_record_naming_its_decision_needs_it_in_the_bundle(site: Site, kind: str) -> None:
    """Not only a settlement names its decision (``decision_hash``): a reversal and a
    needs-attention do too, and a bundle of one of them without its decision (and the mandate
    the decision names) verified."""
    with transaction.atomic():
        decision = append_record(
            site=site,
            kind=AuditKind.APPROVED,
            body={"refund_id": "rf_1", "mandate_sha256": hashlib.sha256(MANDATE).hexdigest()},
        )
        later = append_record(
            site=site, kind=kind, body={"refund_id": "rf_1", "decision_hash": decision.hash}
        )
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    bundle["mandate"] = {"bytes_b64": base64.b64encode(MANDATE).decode("ascii")}
    assert verify_export.verify_bundle(bundle, None, None) == (2, [])

    bundle["records"] = [r for r in bundle["records"] if r["seq"] == later.seq]
    bundle["mandate"] = None
    _, problems = verify_export.verify_bundle(bundle, None, None)
    assert problems == [
        f"FAILED at seq {later.seq}: the decision it follows from is not in the bundle"
    ]


@pytest.mark.parametrize("named", [None, "", 7], ids=["null", "empty", "a number"])
def test_a_bundle_naming_no_refund_is_refused(site: Site, tmp_path: Path, named: object) -> None:
    """Seen: a purchase's genuine bundle (its approval names an order and no refund) with
    ``"order_id"`` changed to ``"refund_id": null`` verified, as ``OK: bundle of 1 records
    about refund None``: a record about no refund names no refund either, so every record
    matched. A bundle is the evidence of one refund or order, named by its id."""
    with transaction.atomic():
        append_record(
            site=site,
            kind=AuditKind.APPROVED,
            body={
                "kind": "purchase",
                "order_id": "ord_1",
                "amount_minor": 8900,
                "currency": "USD",
                "mandate_sha256": hashlib.sha256(MANDATE).hexdigest(),
            },
        )
    bundle = bundles.purchase_bundle(site=site, order_id="ord_1")
    bundle["mandate"] = {"bytes_b64": base64.b64encode(MANDATE).decode("ascii")}
    assert verify_export.verify_bundle(bundle, None, None) == (1, [])

    del bundle["order_id"]
    bundle["refund_id"] = named
    named_none = "FAILED at the bundle: it must name one refund_id or one order_id"
    for log in (None, log_of(site, tmp_path)):
        _, problems = verify_export.verify_bundle(bundle, None, None, log=log)
        assert problems[0] == named_none  # then, for "" or 7: the record is about another
    (tmp_path / "bundle.json").write_text(json.dumps(bundle), encoding="utf-8")
    result = run_standalone(tmp_path, "bundle.json")
    assert (result.returncode, result.stdout) == (1, "")


# -- every record about the refund: checked against an export of the log -----------------------


def settled_then_reversed(site: Site) -> None:
    """rf_1 decided and settled, then reported failed at the rail (its reversal), with another
    refund's record between."""
    with transaction.atomic():
        decision = append_record(site=site, kind=AuditKind.APPROVED, body={"refund_id": "rf_1"})
        append_record(
            site=site,
            kind=AuditKind.SETTLEMENT,
            body={"refund_id": "rf_1", "decision_hash": decision.hash},
        )
        append_record(site=site, kind=AuditKind.APPROVED, body={"refund_id": "rf_2"})
        append_record(
            site=site,
            kind=AuditKind.REFUND_REVERSED,
            body={"refund_id": "rf_1", "decision_hash": decision.hash},
        )


def log_of(site: Site, tmp_path: Path) -> list[str]:
    return export(site, tmp_path / "e.jsonl").read_text(encoding="utf-8").split("\n")


def test_a_bundle_leaving_out_the_reversal_fails_against_the_export(
    site: Site, tmp_path: Path
) -> None:
    """Seen: a bundle showing rf_1 decided and settled, its reversal left out, verified: each
    record it lists is in the log, and nothing in it says more exist. The export does."""
    settled_then_reversed(site)
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    assert [r["seq"] for r in bundle["records"]] == [1, 2, 4]
    log = log_of(site, tmp_path)
    assert verify_export.verify_bundle(bundle, None, None, log=log) == (3, [])

    bundle["records"] = bundle["records"][:2]
    assert verify_export.verify_bundle(bundle, None, None) == (2, [])  # alone, it cannot tell
    _, problems = verify_export.verify_bundle(bundle, None, None, log=log)
    assert problems == [
        "FAILED at seq 4: a record about refund rf_1 (refund_reversed) the bundle leaves out"
    ]


def test_a_bundle_made_before_the_reversal_fails_against_a_later_export(
    site: Site, tmp_path: Path
) -> None:
    """A genuine bundle of an older checkpoint is complete for that checkpoint, not since."""
    with transaction.atomic():
        decision = append_record(site=site, kind=AuditKind.APPROVED, body={"refund_id": "rf_1"})
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    with transaction.atomic():
        append_record(
            site=site,
            kind=AuditKind.REFUND_REVERSED,
            body={"refund_id": "rf_1", "decision_hash": decision.hash},
        )
    _, problems = verify_export.verify_bundle(bundle, None, None, log=log_of(site, tmp_path))
    assert problems == [
        "FAILED at seq 2: a record about refund rf_1 (refund_reversed) after the bundle's "
        "checkpoint (at seq 1): make the bundle again"
    ]


def test_an_export_that_is_not_the_bundles_log_shows_nothing(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    settled_then_reversed(site)
    settled_then_reversed(other_site)
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    _, problems = verify_export.verify_bundle(bundle, None, None, log=log_of(other_site, tmp_path))
    assert problems == [
        f"FAILED at the export: it is the log of site {other_site.pk}, not of the bundle's "
        f"site {site.pk}"
    ]
    # Its own log, with a record changed: an export that does not verify proves nothing.
    log = log_of(site, tmp_path)
    log[4] = log[4].replace("rf_1", "rf_9")
    _, problems = verify_export.verify_bundle(bundle, None, None, log=log)
    assert (
        problems and problems[0] == "FAILED at the export: seq 4: hash does not match the payload"
    )


def test_the_command_checks_a_bundle_against_an_export_and_a_kept_checkpoint(
    site: Site, tmp_path: Path
) -> None:
    """As an auditor runs it: the kept checkpoint is checked against the export (no
    consistency proof needed: both checkpoints are of the one log the export verifies)."""
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.APPROVED, body={"refund_id": "rf_1"})
    kept = checkpoints.write_checkpoint(site=site)
    assert kept is not None
    settled_then_reversed(site)
    (tmp_path / "kept.txt").write_text(kept.note, encoding="utf-8")
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    (tmp_path / "bundle.json").write_text(json.dumps(bundle), encoding="utf-8")
    export(site, tmp_path / "e.jsonl")
    args = ["bundle.json", "--checkpoint", "kept.txt", "--export", "e.jsonl"]

    result = run_standalone(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith("; the export holds no other record about it")

    bundle["records"] = bundle["records"][:-1]
    (tmp_path / "bundle.json").write_text(json.dumps(bundle), encoding="utf-8")
    result = run_standalone(tmp_path, *args)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "FAILED at seq 5: a record about refund rf_1 (refund_reversed) the bundle leaves out"
    )
