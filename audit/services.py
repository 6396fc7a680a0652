"""Writing the audit log: :func:`append_record` is the only way a record comes to exist."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from audit import chain, keys, merkle, tree
from audit.models import (
    DECISION_KINDS,
    AuditChainHead,
    AuditKind,
    AuditRecord,
    AuditTreeNode,
)
from sill.accounts.models import Site


class AuditOutsideTransaction(RuntimeError):
    """``append_record`` was called outside ``transaction.atomic()``."""


def append_record(
    *,
    site: Site,
    kind: str,
    body: Mapping[str, Any],
    before_lock: Callable[[AuditRecord], None] | None = None,
    rehashed: Callable[[AuditRecord], None] | None = None,
) -> AuditRecord:
    """Append a signed record of ``kind`` with ``body`` to ``site``'s chain.

    Must run inside the caller's ``transaction.atomic()`` (raises
    :class:`AuditOutsideTransaction` otherwise), so the record commits or rolls back with the
    change it records; a rolled-back append leaves no gap, the next one reuses its seq.
    Callers do their other writes first: the site's chain head stays locked from the append
    until the transaction ends, so whatever runs after it queues every other append of the
    site behind it.

    ``body`` may hold only dicts, lists, str, int (within ±(2**53 - 1)), bool and None: pass
    money as integer minor units plus currency. Floats and ``Decimal`` raise ``TypeError``.
    For decision kinds ``body["decision"]`` defaults to the kind. Raises ``ValueError`` for an
    unknown kind.

    ``before_lock(record)``: called with the record (hash and signature final, not saved yet)
    before the head is locked, for a write that must carry the record's hash (a decision's
    refund row). If another append of the site commits in between, the record is built again
    on the new head and ``rehashed(record)`` is called with it, under the lock.
    """
    if not connection.in_atomic_block:
        raise AuditOutsideTransaction(
            "append_record must run inside transaction.atomic() with the change it records"
        )
    kind = AuditKind(kind)
    body = dict(body)
    if kind in DECISION_KINDS:
        body.setdefault("decision", kind.value)
    # Canonicalised once (this also refuses floats and the like before anything is written):
    # the payload is spliced around these bytes, never serialised again.
    body_bytes = chain.canonical(body)
    subjects = {
        "subject_refund_id": chain.subject_of(body, "refund_id"),
        "subject_order_id": chain.subject_of(body, "order_id"),
    }

    # Optimistic first: build and sign the record on the head as last committed, unlocked,
    # then take the head's row lock with an UPDATE that succeeds only if no other append came
    # in between. The lock is then held for the record's two INSERTs and the COMMIT only; the
    # signing, hashing and the caller's ``before_lock`` write run outside it. On a lost race
    # the locked path below builds it again (seqs stay gap-free, the chain unbroken).
    head = AuditChainHead.objects.filter(site=site).first()
    if head is not None:
        record, nodes, frontier = _build(site, kind, body_bytes, subjects, head)
        if before_lock is not None:
            before_lock(record)
        won = AuditChainHead.objects.filter(site=site, last_seq=head.last_seq).update(
            last_seq=record.seq, last_hash=record.hash, tree_frontier=frontier
        )
        if won:
            _save(record, nodes)
            return record

    # The row lock serialises appends per site on PostgreSQL (SQLite's IMMEDIATE transactions
    # already serialise writers). get_or_create creates the head on a site's first append in
    # a savepoint; if a concurrent transaction created it first, the IntegrityError is caught
    # and the locked get() retried, which waits for that transaction to finish.
    locked, _ = AuditChainHead.objects.select_for_update().get_or_create(
        site=site, defaults={"last_seq": 0, "last_hash": chain.GENESIS_HASH}
    )
    record, nodes, frontier = _build(site, kind, body_bytes, subjects, locked)
    if head is None:
        if before_lock is not None:
            before_lock(record)
    elif rehashed is not None:
        rehashed(record)
    locked.last_seq, locked.last_hash, locked.tree_frontier = record.seq, record.hash, frontier
    locked.save(update_fields=["last_seq", "last_hash", "tree_frontier"])
    _save(record, nodes)
    return record


def _build(
    site: Site,
    kind: AuditKind,
    body_bytes: bytes,
    subjects: dict[str, str],
    head: AuditChainHead,
) -> tuple[AuditRecord, list[AuditTreeNode], str]:
    """The record that follows ``head``, its tree nodes and the tree's new edge (no writes)."""
    seq = head.last_seq + 1
    # Taken after ``head`` was read: every record already on it was timed before this one.
    recorded_at = _now_ms()
    stamp = recorded_at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{recorded_at.microsecond // 1000:03d}Z"
    payload = _payload_bytes(
        site_id=site.pk, seq=seq, kind=kind.value, stamp=stamp, body=body_bytes
    )
    digest = chain.record_hash(head.last_hash, payload)
    key_id, signing_key = keys.signing_key(recorded_at)
    text = payload.decode("utf-8")
    grown, edge = tree.grow(
        tree.parse_frontier(head.tree_frontier), head.last_seq, merkle.record_leaf_hash(text)
    )
    record = AuditRecord(
        site=site,
        seq=seq,
        kind=kind.value,
        payload=text,
        prev_hash=head.last_hash,
        hash=digest,
        signature=chain.sign_hash(digest, signing_key),
        key_id=key_id,
        created_at=recorded_at,
        **subjects,
    )
    nodes = [
        AuditTreeNode(site_id=site.pk, level=level, index=index, hash=node.hex())
        for level, index, node in grown
    ]
    return record, nodes, tree.format_frontier(edge)


def _payload_bytes(*, site_id: str, seq: int, kind: str, stamp: str, body: bytes) -> bytes:
    """RFC 8785 bytes of ``{"site_id", "seq", "kind", "recorded_at", "body"}`` around the
    body's own canonical bytes: JCS writes a member's value exactly as it writes it alone, and
    orders these keys body, kind, recorded_at, seq, site_id (tests/audit/test_append.py checks
    it against a whole re-serialisation)."""

    text = chain.canonical
    return b"".join(
        (
            b'{"body":', body, b',"kind":', text(kind), b',"recorded_at":', text(stamp),
            b',"seq":', str(seq).encode("ascii"), b',"site_id":', text(site_id), b"}",
        )
    )  # fmt: skip


def _save(record: AuditRecord, nodes: list[AuditTreeNode]) -> None:
    record.save(force_insert=True)
    AuditTreeNode.objects.bulk_create(nodes)


def _now_ms() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
