"""Writing the audit log: :func:`append_record` is the only way a record comes to exist."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from audit import chain, keys, tree
from audit.models import (
    DECISION_KINDS,
    AuditChainHead,
    AuditKind,
    AuditRecord,
)
from sill.accounts.models import Site


class AuditOutsideTransaction(RuntimeError):
    """``append_record`` was called outside ``transaction.atomic()``."""


def append_record(*, site: Site, kind: str, body: Mapping[str, Any]) -> AuditRecord:
    """Append a signed record of ``kind`` with ``body`` to ``site``'s chain.

    Must run inside the caller's ``transaction.atomic()`` (raises
    :class:`AuditOutsideTransaction` otherwise), so the record commits or rolls back with the
    change it records; a rolled-back append leaves no gap, the next one reuses its seq.

    ``body`` may hold only dicts, lists, str, int (within ±(2**53 - 1)), bool and None: pass
    money as integer minor units plus currency. Floats and ``Decimal`` raise ``TypeError``.
    For decision kinds ``body["decision"]`` defaults to the kind. Raises ``ValueError`` for an
    unknown kind.
    """
    if not connection.in_atomic_block:
        raise AuditOutsideTransaction(
            "append_record must run inside transaction.atomic() with the change it records"
        )
    kind = AuditKind(kind)
    body = dict(body)
    if kind in DECISION_KINDS:
        body.setdefault("decision", kind.value)
    chain.canonical(body)  # refuse floats and the like before taking the lock

    # The row lock serialises appends per site on PostgreSQL (SQLite's IMMEDIATE transactions
    # already serialise writers). get_or_create creates the head on a site's first append in
    # a savepoint; if a concurrent transaction created it first, the IntegrityError is caught
    # and the locked get() retried, which waits for that transaction to finish.
    head, _ = AuditChainHead.objects.select_for_update().get_or_create(
        site=site, defaults={"last_seq": 0, "last_hash": chain.GENESIS_HASH}
    )
    seq = head.last_seq + 1
    recorded_at = _now_ms()
    payload = chain.canonical(
        {
            "site_id": site.pk,
            "seq": seq,
            "kind": kind.value,
            "recorded_at": recorded_at.strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{recorded_at.microsecond // 1000:03d}Z",
            "body": body,
        }
    )
    digest = chain.record_hash(head.last_hash, payload)
    key_id, signing_key = keys.signing_key(recorded_at)
    record = AuditRecord(
        site=site,
        seq=seq,
        kind=kind.value,
        payload=payload.decode("utf-8"),
        prev_hash=head.last_hash,
        hash=digest,
        signature=chain.sign_hash(digest, signing_key),
        key_id=key_id,
        created_at=recorded_at,
        subject_refund_id=chain.subject_of(body, "refund_id"),
        subject_order_id=chain.subject_of(body, "order_id"),
    )
    record.save()
    tree.append_leaf(head=head, payload=record.payload)
    head.last_seq = seq
    head.last_hash = digest
    head.save(update_fields=["last_seq", "last_hash", "tree_frontier"])
    return record


def _now_ms() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
