"""The stored Merkle tree grows with every append, proves any record, can be rebuilt, and
verification checks every stored node against the records."""

from __future__ import annotations

import base64
import importlib

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit import checkpoints, merkle, selectors, tree
from audit.models import AuditChainHead, AuditKind, AuditRecord, AuditTreeNode
from audit.selectors import chain_verification
from audit.services import append_record
from sill.accounts.models import Site

pytestmark = pytest.mark.django_db


def append(site: Site, n: int) -> None:
    for i in range(n):
        with transaction.atomic():
            append_record(site=site, kind=AuditKind.SETTLEMENT, body={"refund_id": f"rf_{i}"})


def leaves(site: Site) -> list[bytes]:
    payloads = (
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("payload", flat=True)
    )
    return [merkle.record_leaf_hash(p) for p in payloads]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 13])
def test_the_stored_tree_is_the_tree_of_the_records(site: Site, n: int):
    append(site, n)
    expected = merkle.root_of(leaves(site))
    head = AuditChainHead.objects.get(site=site)
    assert tree.root_from_frontier(tree.parse_frontier(head.tree_frontier)) == expected
    assert tree.StoredTree(site.pk, n).root() == expected
    # Every complete subtree is stored once: n leaves and n - popcount(n) inner nodes.
    assert AuditTreeNode.objects.filter(site=site).count() == 2 * n - bin(n).count("1")


def test_stored_proofs_verify_for_every_record_and_prefix(site: Site):
    append(site, 11)
    hashes = leaves(site)
    for size in (5, 8, 11):
        stored = tree.StoredTree(site.pk, size)
        root = merkle.root_of(hashes[:size])
        for index in range(size):
            merkle.verify_inclusion(index, size, hashes[index], stored.inclusion_proof(index), root)
        for size1 in range(1, size + 1):
            merkle.verify_consistency(
                size1, size, merkle.root_of(hashes[:size1]), root, stored.consistency_proof(size1)
            )


def test_a_proof_costs_one_query(site: Site, django_assert_num_queries):
    append(site, 21)
    stored = tree.StoredTree(site.pk, 21)
    with django_assert_num_queries(1):
        stored.inclusion_proof(6)


def test_an_append_writes_the_tree_in_one_insert(site: Site):
    append(site, 3)
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"refund_id": "rf_x"})
    statements = [
        q["sql"].split()[0] for q in captured if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    # Head read, head update (the lock, taken last), record, the leaf and the two nodes it
    # completes (one insert). On PostgreSQL the last three are one statement, so the lock is
    # held for one round trip and the COMMIT.
    if connection.vendor == "postgresql":
        assert statements == ["SELECT", "WITH"]
        one = next(q["sql"] for q in captured if q["sql"].startswith("WITH"))
        assert "audit_audittreenode" in one and "audit_auditrecord" in one
    else:
        assert statements == ["SELECT", "UPDATE", "INSERT", "INSERT"]
    assert AuditTreeNode.objects.filter(site=site).count() == 7  # 4 leaves, 2 + 1 above them


def test_the_migration_builds_the_tree_of_an_existing_log(site: Site):
    append(site, 9)
    expected = merkle.root_of(leaves(site))
    AuditTreeNode.objects.filter(site=site).delete()
    AuditChainHead.objects.filter(site=site).update(tree_frontier="")

    importlib.import_module("audit.migrations.0006_merkle_tree").build_trees(apps, None)

    head = AuditChainHead.objects.get(site=site)
    assert tree.root_from_frontier(tree.parse_frontier(head.tree_frontier)) == expected
    assert tree.StoredTree(site.pk, 9).root() == expected


def test_verify_catches_a_changed_node_the_frontier_no_longer_holds(site: Site):
    append(site, 4)
    checkpoints.write_checkpoint(site=site)
    AuditTreeNode.objects.filter(site=site, level=0, index=0).update(hash="ab" * 32)

    # Why it matters: Sill now serves a proof for record 2 that misses its own checkpoint.
    answer = Client().get(f"/audit/{site.pk}/proof/inclusion?seq=2").json()
    latest = checkpoints.latest_checkpoint(site_id=site.pk)
    assert latest is not None
    with pytest.raises(merkle.ProofError):
        merkle.verify_inclusion(
            1,
            4,
            leaves(site)[1],
            [base64.b64decode(h) for h in answer["proof"]],
            bytes.fromhex(latest.root_hash),
        )

    result = chain_verification(site)
    assert not result.ok
    assert result.problem == (
        "the stored Merkle tree's node at level 0, index 0 does not match the records"
    )


def test_verify_compares_every_stored_node_a_batch_of_records_at_a_time(
    site: Site, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(selectors, "RECORDS_PER_BATCH", 3)  # 13 records: five batches
    append(site, 13)
    assert chain_verification(site).ok
    for node in AuditTreeNode.objects.filter(site=site):
        AuditTreeNode.objects.filter(pk=node.pk).update(hash="ab" * 32)
        result = chain_verification(site)
        assert result.problem == (
            f"the stored Merkle tree's node at level {node.level}, index {node.index} does "
            "not match the records"
        )
        AuditTreeNode.objects.filter(pk=node.pk).update(hash=node.hash)
    AuditTreeNode.objects.filter(site=site, level=2, index=1).delete()
    assert not chain_verification(site).ok


def test_verify_reads_the_stored_nodes_in_one_query_a_batch(
    site: Site, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(selectors, "RECORDS_PER_BATCH", 5)
    append(site, 10)
    with CaptureQueriesContext(connection) as few:
        assert chain_verification(site).ok
    append(site, 10)
    with CaptureQueriesContext(connection) as many:
        assert chain_verification(site).ok
    assert len(many.captured_queries) == len(few.captured_queries) + 2


@pytest.mark.parametrize("path", ["proof/inclusion?seq=2", "proof/consistency?from=1&to=4"])
def test_a_corrupt_stored_node_is_a_clear_refusal_not_a_500(site: Site, path: str):
    append(site, 4)
    checkpoints.write_checkpoint(site=site)
    AuditTreeNode.objects.filter(site=site).update(hash="not hex")
    answer = Client(raise_request_exception=False).get(f"/audit/{site.pk}/{path}")
    assert answer.status_code == 404
    assert "corrupt" in answer.json()["error"]["message"]
