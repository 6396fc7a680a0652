"""What the standalone verifier asks of an evidence bundle beyond its records and proofs (a
whole agent refund's bundle: tests/refunds/test_evidence_bundle.py): the mandate a decision
names comes with it, and an edited record is a problem listed, never a crash."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from django.db import transaction

from audit import bundles, verify_export
from audit.models import AuditKind
from audit.services import append_record
from sill.accounts.models import Site

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
