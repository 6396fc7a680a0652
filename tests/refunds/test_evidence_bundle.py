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
from django.db import transaction
from django.test import Client

from audit import chain, keys, merkle
from audit.checkpoints import origin_for, write_checkpoint
from audit.models import AuditKind, AuditRecord
from audit.services import append_record
from refunds.models import Refund
from refunds.review.decisions import approve_refund
from tests.audit.test_auditor_attacks import signed_checkpoint
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


def test_the_ok_line_names_the_refund_the_bundle_is_about(
    settled_agent_refund, staff_refund, order, tmp_path: Path
) -> None:
    """An auditor asked about one refund and handed another's genuine bundle (of the same
    site) read the same OK line either way: it named the log, never the refund."""
    other = staff_refund(order)
    for refund in (settled_agent_refund, other):
        result = run_standalone(tmp_path, str(bundle_file(refund, tmp_path)))
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("OK: bundle of ")
        assert f" records about refund {refund.pk} of log " in result.stdout


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


def fetch(tmp_path: Path, name: str, url: str) -> Path:
    """What an auditor saves of Sill's public answer at ``url``, byte for byte."""
    answer = Client().get(url)
    assert answer.status_code == 200, answer.content
    path = tmp_path / name
    path.write_bytes(answer.content)
    return path


def grow_log(site) -> str:
    """One more record in ``site``'s log; its payload."""
    with transaction.atomic():
        record = append_record(site=site, kind=AuditKind.REVIEW, body={"note": "the log goes on"})
    return record.payload


def size_of(note: str) -> int:
    return int(note.split("\n")[1])


@pytest.mark.parametrize("kept", ["before the bundle", "after the bundle"])
def test_a_bundle_verifies_against_a_checkpoint_the_auditor_kept(
    settled_agent_refund, tmp_path: Path, kept: str
) -> None:
    """How an auditor verifies (docs/audit.md): the keys file, the pinned configured key and a
    checkpoint they kept. A bundle's checkpoint is signed when it is made, so it is hardly ever
    the one they kept, and every genuine bundle failed ("fetch the consistency proof between
    them") with no way to give the verifier that proof. It takes it now (--consistency)."""
    site = settled_agent_refund.site
    checkpoint_url = f"/audit/{site.pk}/checkpoint"
    if kept == "before the bundle":
        write_checkpoint(site=site)
        kept_file = fetch(tmp_path, "kept.txt", checkpoint_url)
        grow_log(site)
        path = bundle_file(settled_agent_refund, tmp_path)
    else:
        path = bundle_file(settled_agent_refund, tmp_path)
        grow_log(site)
        write_checkpoint(site=site)
        kept_file = fetch(tmp_path, "kept.txt", checkpoint_url)
    kept_size = size_of(kept_file.read_text())
    bundle_size = size_of(json.loads(path.read_text())["checkpoint"])
    small, large = sorted([kept_size, bundle_size])
    assert small < large
    keys_file = fetch(tmp_path, "sill-audit-keys.json", "/.well-known/sill-audit-keys.json")
    key_id, key = keys.configured_key()
    auditor = [
        "--keys", str(keys_file),
        "--public-key", f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}",
        "--checkpoint", str(kept_file),
    ]  # fmt: skip
    ask = f"/audit/{site.pk}/proof/consistency?from={small}&to={large}"

    without = run_standalone(tmp_path, str(path), *auditor)
    assert without.returncode == 1
    assert without.stderr.strip() == (
        f"FAILED at the trusted checkpoint: it is not the bundle's checkpoint (sizes {kept_size} "
        f"and {bundle_size}): pass the proof that one extends the other with --consistency "
        f"FILE, the answer of GET {ask}"
    )

    proof = fetch(tmp_path, "proof.json", ask)
    result = run_standalone(tmp_path, str(path), *auditor, "--consistency", str(proof))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: bundle of ")


def test_a_bundle_of_a_log_forked_from_the_kept_checkpoint_fails_even_with_a_proof(
    settled_agent_refund, tmp_path: Path
) -> None:
    """The auditor kept a checkpoint of a log the bundle's does not extend (signed by Sill's own
    key: an operator who rewrote the log). Sill's genuine proof between the sizes cannot tie
    the two together, and neither can a checkpoint of the same size under another root."""
    site = settled_agent_refund.site
    origin, key = origin_for(site.pk), keys.configured_key()[1]
    payloads = list(
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("payload", flat=True)
    )
    rewritten = [*payloads[:-2], payloads[-1], payloads[-2]]  # the last two swapped
    size = len(rewritten)
    grown = grow_log(site)
    path = bundle_file(settled_agent_refund, tmp_path)
    assert size_of(json.loads(path.read_text())["checkpoint"]) == size + 1
    fork = tmp_path / "fork.txt"

    fork.write_text(signed_checkpoint(origin, rewritten, key))
    proof = fetch(tmp_path, "proof.json", f"/audit/{site.pk}/proof/consistency?from={size}")
    result = run_standalone(
        tmp_path, str(path), "--checkpoint", str(fork), "--consistency", str(proof)
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        "FAILED at the consistency proof: the consistency proof does not lead to both roots: "
        f"it does not show that the tree of {size + 1} records extends the one of {size}"
    )

    fork.write_text(signed_checkpoint(origin, [*rewritten, grown], key))
    result = run_standalone(tmp_path, str(path), "--checkpoint", str(fork))
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"FAILED at the trusted checkpoint: it counts the same {size + 1} records as the "
        "bundle's checkpoint, under another root: the log was rewritten (forked)"
    )
