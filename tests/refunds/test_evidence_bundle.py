"""A refund's evidence bundle (`audit bundle --refund R`, the refund page's download): the
mandate's bytes, every record about the refund with its inclusion proof, a checkpoint; the
standalone verifier checks it and lists every problem it finds."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from audit import merkle
from audit.checkpoints import origin_for
from refunds.models import Refund
from refunds.review.decisions import approve_refund
from tests.audit.test_tamper import run_standalone
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def settled_agent_refund(
    client, sign, original, agent, members, django_capture_on_commit_callbacks
):
    held = hold_refund(order=original, agent=agent)
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["owner"].user)
    held.refresh_from_db()
    assert held.status == "succeeded"
    return held


def bundle_file(refund: Refund, tmp_path: Path) -> Path:
    path = tmp_path / "bundle.json"
    call_command("audit", "bundle", "--refund", refund.pk, "--output", str(path))
    return path


def test_the_bundle_of_a_settled_agent_refund_verifies(settled_agent_refund, tmp_path: Path):
    path = bundle_file(settled_agent_refund, tmp_path)
    bundle = json.loads(path.read_text())
    kinds = [json.loads(r["payload"])["kind"] for r in bundle["records"]]
    assert kinds[0] == "escalated" and "escalated_approved" in kinds and "settlement" in kinds
    raw = base64.b64decode(bundle["mandate"]["bytes_b64"])
    assert raw == bytes(settled_agent_refund.mandate.raw)

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"OK: bundle of {len(kinds)} records")
    # It names the log, so an auditor sees whose refund it is.
    assert f" of log {origin_for(settled_agent_refund.site_id)}," in result.stdout


def test_every_problem_in_a_tampered_bundle_is_listed(settled_agent_refund, tmp_path: Path):
    path = bundle_file(settled_agent_refund, tmp_path)
    bundle = json.loads(path.read_text())
    # A changed amount in the first record, a corrupted proof of the second, other mandate bytes.
    first = bundle["records"][0]
    first["payload"] = first["payload"].replace('"amount_minor":8900', '"amount_minor":100')
    proof = bundle["records"][1]["inclusion_proof"]
    proof[0] = base64.b64encode(bytes(32)).decode()
    bundle["mandate"]["bytes_b64"] = base64.b64encode(b'{"signed": {}}').decode()
    path.write_text(json.dumps(bundle))

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1
    problems = result.stderr.strip().splitlines()
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"FAILED at seq {first['seq']}: hash does not match")
    assert "not in the checkpointed log" in problems[1]
    assert "the mandate" in problems[2]


def test_a_bundle_with_a_wrong_key_is_refused(settled_agent_refund, tmp_path: Path):
    path = bundle_file(settled_agent_refund, tmp_path)
    result = run_standalone(
        tmp_path, str(path), "--public-key", "sill-0000000000000000=" + "A" * 43
    )
    assert result.returncode == 1
    assert "not signed by a known key" in result.stderr


def test_a_staff_refund_has_a_bundle_without_a_mandate(staff_refund, order, tmp_path: Path):
    refund = staff_refund(order)
    bundle = json.loads(bundle_file(refund, tmp_path).read_text())
    assert bundle["mandate"] is None and bundle["records"]
    assert run_standalone(tmp_path, str(bundle_file(refund, tmp_path))).returncode == 0


def test_its_proofs_lead_to_the_checkpoints_root(settled_agent_refund, tmp_path: Path):
    bundle = json.loads(bundle_file(settled_agent_refund, tmp_path).read_text())
    size, root = (
        int(bundle["checkpoint"].split("\n")[1]),
        base64.b64decode(bundle["checkpoint"].split("\n")[2]),
    )
    for record in bundle["records"]:
        merkle.verify_inclusion(
            record["seq"] - 1,
            size,
            merkle.record_leaf_hash(record["payload"]),
            [base64.b64decode(h) for h in record["inclusion_proof"]],
            root,
        )


def test_the_refund_page_offers_it_to_who_may_read_the_log(
    settled_agent_refund, client_for, other_site, tmp_path: Path
):
    url = f"/refunds/{settled_agent_refund.pk}/evidence.json"
    answer = client_for("reviewer").get(url)
    assert answer.status_code == 200
    assert answer["Content-Disposition"].startswith("attachment;")
    body = json.loads(answer.content)
    assert body["refund_id"] == settled_agent_refund.pk
    assert hashlib.sha256(base64.b64decode(body["mandate"]["bytes_b64"])).hexdigest()
    assert client_for("staff").get(url).status_code == 403
    assert client_for("outsider").get(url).status_code == 404
    assert Client().get(url).status_code == 302


def test_a_bundle_whose_decision_was_taken_out_is_refused(settled_agent_refund, tmp_path: Path):
    """The settlement names its decision's hash: without that record (and the mandate it
    names) the bundle no longer shows the decision is in the log, so it must not verify."""
    path = bundle_file(settled_agent_refund, tmp_path)
    bundle = json.loads(path.read_text())
    bundle["records"] = [
        r for r in bundle["records"] if json.loads(r["payload"])["kind"] == "settlement"
    ]
    bundle["mandate"] = None
    path.write_text(json.dumps(bundle))

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1, result.stdout
    assert "the decision it settles is not in the bundle" in result.stderr


def test_a_bundle_listing_a_record_twice_is_refused(settled_agent_refund, tmp_path: Path):
    """Each record holds its own proof, so a copy of the settlement verified on its own and
    the bundle said "OK" with one more record than the log has: read by a person, a refund
    settled twice. A seq listed twice is refused, naming it."""
    path = bundle_file(settled_agent_refund, tmp_path)
    bundle = json.loads(path.read_text())
    settlement = next(
        r for r in bundle["records"] if json.loads(r["payload"])["kind"] == "settlement"
    )
    bundle["records"].append(dict(settlement))
    path.write_text(json.dumps(bundle))

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1, result.stdout
    assert f"FAILED at seq {settlement['seq']}: the record is listed twice" in result.stderr


def test_a_held_refunds_bundle_without_its_escalation_is_refused(
    settled_agent_refund, tmp_path: Path
) -> None:
    """A held agent refund's first record (escalated) is the one that names the mandate's
    SHA-256, the rules that fired and the facts. Taken out with the mandate, the bundle still
    verified: the reviewer's approval names it only as ``escalated_hash``, which nobody
    checked. Every hash a record names must be in the bundle."""
    path = bundle_file(settled_agent_refund, tmp_path)
    bundle = json.loads(path.read_text())
    escalated = next(
        r for r in bundle["records"] if json.loads(r["payload"])["kind"] == "escalated"
    )
    approval = next(
        r for r in bundle["records"] if json.loads(r["payload"])["kind"] == "escalated_approved"
    )
    assert json.loads(approval["payload"])["body"]["escalated_hash"] == escalated["hash"]
    bundle["records"] = [r for r in bundle["records"] if r is not escalated]
    bundle["mandate"] = None
    path.write_text(json.dumps(bundle))

    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1, result.stdout
    assert result.stderr.strip().splitlines() == [
        f"FAILED at seq {approval['seq']}: the escalation it decides is not in the bundle"
    ]
