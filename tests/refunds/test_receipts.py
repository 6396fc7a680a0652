"""Decision receipts: the mandate answer and GET /api/v1/refunds/{mandate_id} carry Sill's
signed statement of the decision, which an agent checks offline with only PyNaCl and the key
published at /.well-known/sill-audit-keys.json; a changed byte fails."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token
from tests.conftest import site_owner
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

# The whole check an agent runs: PyNaCl, the answer, the published keys. Nothing of Sill.
AGENT_SCRIPT = """
import base64, json, sys
import nacl.signing
answer, published = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
receipt = answer["receipt"]
key = next(k for k in published["keys"] if k["key_id"] == receipt["key_id"])
public = base64.urlsafe_b64decode(key["public_key"] + "==")
signature = base64.urlsafe_b64decode(receipt["signature"] + "==")
nacl.signing.VerifyKey(public).verify(b"sill-receipt-v1:" + receipt["statement"].encode(), signature)
stated = json.loads(receipt["statement"])
assert stated["mandate_id"] == answer["mandate_id"] and stated["decision"] == answer["decision"]
print(stated["audit_seq"], stated["amount_minor"], stated["mandate_sha256"])
"""


def run_agent_check(tmp_path: Path, answer: dict, published: dict) -> subprocess.CompletedProcess:
    (tmp_path / "check.py").write_text(AGENT_SCRIPT)
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    (tmp_path / "keys.json").write_text(json.dumps(published))
    return subprocess.run(
        [sys.executable, "-I", str(tmp_path / "check.py"), "answer.json", "keys.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_answer_carries_a_receipt_an_agent_verifies_offline(
    client: Client, sign, original, agent, tmp_path: Path
):
    body = sign(refund_intent(ORIGINAL))
    answer = post(client, body).json()
    published = client.get("/.well-known/sill-audit-keys.json").json()

    result = run_agent_check(tmp_path, answer, published)
    assert result.returncode == 0, result.stderr
    seq, amount, mandate_sha256 = result.stdout.split()
    record = AuditRecord.objects.get(site=original.site, seq=int(seq))
    assert record.kind == "approved" and int(amount) == 8900
    assert mandate_sha256 == hashlib.sha256(body).hexdigest()  # the bytes the agent sent

    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    again = client.get(
        f"/api/v1/refunds/{answer['mandate_id']}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert json.loads(again["receipt"]["statement"]) == json.loads(answer["receipt"]["statement"])


@pytest.mark.parametrize("part", ["statement", "signature"])
def test_a_changed_byte_fails(client: Client, sign, original, tmp_path: Path, part: str):
    answer = post(client, sign(refund_intent(ORIGINAL))).json()
    published = client.get("/.well-known/sill-audit-keys.json").json()
    text = answer["receipt"][part]
    if part == "statement":
        changed = text.replace('"amount_minor":8900', '"amount_minor":8901')
    else:
        changed = ("B" if text[10] != "B" else "C").join([text[:10], text[11:]])
    assert changed != text
    answer["receipt"][part] = changed
    assert run_agent_check(tmp_path, answer, published).returncode == 1


def test_a_rejected_refund_has_a_receipt_of_its_rejection(client: Client, sign, agent, site):
    answer = post(client, sign(refund_intent("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTZ"))).json()
    assert answer["decision"] == "rejected"
    stated = json.loads(answer["receipt"]["statement"])
    assert stated["decision"] == "rejected" and stated["refund_id"] == answer["refund_id"]


def test_the_inclusion_proof_docs_point_to_answers_once_a_checkpoint_covers_the_record(
    client: Client, sign, original
):
    """docs/audit.md "Receipts": "then: GET /audit/<site>/proof/inclusion?seq=<audit_seq>".
    Seen, followed at once: 404 ``not_found`` (no checkpoint yet) or 400 ``invalid_field``
    (the latest checkpoint is older than the record), which the page did not say: the proof
    is there once beat signs a checkpoint covering the record."""
    stated = json.loads(post(client, sign(refund_intent(ORIGINAL))).json()["receipt"]["statement"])
    proof_of = "/audit/{site_id}/proof/inclusion?seq={audit_seq}".format
    early = client.get(proof_of(**stated))
    assert (early.status_code, early.json()["error"]["code"]) == (404, "not_found")

    call_command("audit", "checkpoint", "--site", stated["site_id"], stdout=io.StringIO())
    proof = client.get(proof_of(**stated))
    assert proof.status_code == 200, proof.content
    assert proof.json()["leaf_hash"] == stated["audit_leaf_hash"]
    assert proof.json()["checkpoint"].split("\n")[1] == str(proof.json()["tree_size"])

    rejected = post(client, sign(refund_intent("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTZ"))).json()
    newer = json.loads(rejected["receipt"]["statement"])
    late = client.get(proof_of(**newer))
    assert (late.status_code, late.json()["error"]["code"]) == (400, "invalid_field")
    assert late.json()["error"]["field"] == "seq"

    page = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text()
    receipts = page.split("## Receipts", 1)[1].split("\n## ", 1)[0]
    for said in ("404 `not_found`", "400 `invalid_field`", "SILL_AUDIT_CHECKPOINT_MINUTES"):
        assert said in receipts, said
