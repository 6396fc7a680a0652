"""Writing the audit log: :func:`append_record` is the only way a record comes to exist."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from audit import chain, keys, merkle, tree
from audit.models import (
    DECISION_KINDS,
    AuditChainHead,
    AuditKind,
    AuditRecord,
)
from sill import sql
from sill.accounts.models import Site
from sill.sql import cols, fetch_row, for_update

logger = logging.getLogger(__name__)


class AuditOutsideTransaction(RuntimeError):
    """``append_record`` was called outside ``transaction.atomic()``."""


def append_record(
    *,
    site: Site,
    kind: str,
    body: Mapping[str, Any],
    before_lock: Callable[[AuditRecord], None] | None = None,
    rehashed: Callable[[AuditRecord], None] | None = None,
    writes: Callable[[AuditRecord], Sequence[sql.Write]] | None = None,
    guard: sql.Guard | None = None,
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

    ``writes(record)``: the caller's writes that carry the record's hash (a decision's refund
    row, its reservation), sent with the append itself, which writes them only if it moves
    the head: in its one statement on PostgreSQL, after the head UPDATE on SQLite. If another
    append moved the head first, nothing was written and they are asked for again with the
    record built anew.

    ``guard``: read with the chain head, in the same statement, and checked before the record
    is built on it (its ``check`` raises to stop the append; nothing is written). The append
    takes the head only if nothing moved it since that read, so what the guard saw still held
    when the record went into the chain, and holds until this transaction ends (the head stays
    locked): a decision's policy version, say, is still the active one.

    ``before_lock(record)``: called with the record (hash and signature final, not saved yet)
    before the head is locked, for a write of the caller's own that must carry its hash. If
    another append of the site commits in between, the record is built again on the new head
    and ``rehashed(record)`` is called with it.
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
    # in between. The lock is then held for that one statement (with the record's INSERTs and
    # the caller's ``writes``) and the COMMIT; the signing, hashing and ``before_lock`` run
    # outside it. A lost race builds the record again on the new head, unlocked, a few times
    # (appends that queued on the head all lose at once when it moves: rebuilding under the
    # lock made them wait for one another in turn), then under the lock (seqs stay gap-free,
    # the chain unbroken). Hand-written SQL (issue 18: the ORM spent more CPU building these
    # statements than the database running them).
    head_cols = cols(AuditChainHead, "h")
    wrote_before = False
    guarded = f", {guard.sql}" if guard is not None else ""
    guard_params = list(guard.params) if guard is not None else []

    def check_guard() -> None:
        if guard is not None:
            checked = fetch_row(f"SELECT {guard.sql}", guard_params)
            guard.check(checked[0] if checked is not None else None)

    def build_on(head: AuditChainHead) -> tuple[AuditRecord, list[Any], str, list[sql.Write]]:
        nonlocal wrote_before
        record, nodes, frontier = _build(site, kind, body_bytes, subjects, head)
        if wrote_before and rehashed is not None:
            rehashed(record)
        elif not wrote_before and before_lock is not None:
            before_lock(record)
        wrote_before = True
        return record, nodes, frontier, list(writes(record)) if writes is not None else []

    for _attempt in range(_UNLOCKED_ATTEMPTS):
        # The guard in the same statement: one snapshot with the head the append builds on.
        row = fetch_row(
            f'SELECT {head_cols.sql}{guarded} FROM "audit_auditchainhead" "h" '  # noqa: S608
            'WHERE "h"."site_id" = %s',
            [*guard_params, site.pk],
        )
        if row is None:
            break  # the site's first append: the locked path creates the head
        if guard is not None:
            guard.check(row[-1])
        head = head_cols.build(row)
        record, nodes, frontier, extra = build_on(head)
        if _append_on(head, record, nodes, frontier, extra):
            return record

    # The row lock serialises appends per site on PostgreSQL (SQLite's IMMEDIATE transactions
    # already serialise writers, so there the first attempt always wins). On a site's first
    # append get_or_create creates the head in a savepoint; if a concurrent transaction
    # created it first, the IntegrityError is caught and the locked get() retried, which
    # waits for that transaction to finish.
    row = fetch_row(
        f'SELECT {head_cols.sql} FROM "audit_auditchainhead" "h" WHERE "h"."site_id" = %s'  # noqa: S608
        + for_update(),
        [site.pk],
    )
    if row is not None:
        locked = head_cols.build(row)
    else:
        locked, _ = AuditChainHead.objects.select_for_update().get_or_create(
            site=site, defaults={"last_seq": 0, "last_hash": chain.GENESIS_HASH}
        )
    # Read in a statement of its own once the head is ours: a statement that waited for the
    # head's lock reads its sub-selects as they were before the holder committed. Nothing it
    # guards can change now until this transaction ends (it would append to this chain).
    check_guard()
    record, nodes, frontier, extra = build_on(locked)
    # The head is locked: nothing can move it between the read and this write.
    if not _append_on(locked, record, nodes, frontier, extra):
        raise RuntimeError(f"site {site.pk}: the locked audit chain head moved")
    return record


# Lost races rebuilt without the head's lock before an append takes it to build on.
_UNLOCKED_ATTEMPTS = 3


def _build(
    site: Site,
    kind: AuditKind,
    body_bytes: bytes,
    subjects: dict[str, str],
    head: AuditChainHead,
) -> tuple[AuditRecord, list[tuple[int, int, str]], str]:
    """The record that follows ``head``, its tree nodes as ``(level, index, hash)`` and the
    tree's new edge (no writes)."""
    seq = head.last_seq + 1
    recorded_at = _timed_after(head)
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
    nodes = [(level, index, node.hex()) for level, index, node in grown]
    return record, nodes, tree.format_frontier(edge)


def _timed_after(head: AuditChainHead) -> datetime:
    """This record's ``recorded_at``: now, never before the record it follows.

    Now is taken after ``head`` was read, so on one host every record already on it was timed
    before this one. Sill's hosts each time records by their own clock, though: one running
    behind another, appending just after a key switch, would time its record before its
    predecessor and sign it with the retired key, and verification refuses a retired key after
    its successor signed. Timed at the predecessor's instant instead, the record is signed by
    the predecessor's key (or a later one), and recorded_at never goes backwards in a chain.
    """
    now = _now_ms()
    last = head.last_recorded_at
    if last is None or now >= last:
        return now
    if last - now > _SKEW_WORTH_A_WARNING:
        logger.warning(
            "audit: site %s's last record was timed %.3f s ahead of this host's clock; this "
            "record takes its time (are the hosts' clocks in step?)",
            head.site_id,
            (last - now).total_seconds(),
        )
    return last


# Records of one site timed further apart than this by different hosts' clocks are logged.
_SKEW_WORTH_A_WARNING = timedelta(seconds=1)


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


# Every column but the auto id, in the order _save gives the values
# (tests/audit/test_append_sql.py holds these lists to the models).
_INSERT_RECORD_INTO = (
    'INSERT INTO "audit_auditrecord" ("site_id", "seq", "kind", "payload", "prev_hash", "hash",'
    ' "signature", "key_id", "created_at", "subject_refund_id", "subject_order_id")'
)
_RECORD_VALUES = "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
_INSERT_RECORD = f"{_INSERT_RECORD_INTO} VALUES ({_RECORD_VALUES})"
_TAKE_HEAD = (
    'UPDATE "audit_auditchainhead" SET "last_seq" = %s, "last_hash" = %s, "tree_frontier" = %s,'
    ' "last_recorded_at" = %s WHERE "site_id" = %s AND "last_seq" = %s'
)
_INSERT_TREE_NODES = 'INSERT INTO "audit_audittreenode" ("site_id", "level", "index", "hash")'


def _append_on(
    head: AuditChainHead,
    record: AuditRecord,
    nodes: list[tuple[int, int, str]],
    frontier: str,
    writes: Sequence[sql.Write] = (),
) -> bool:
    """Move the site's head from ``head`` to ``record``, INSERT the record and its tree nodes
    and run ``writes``, if no other append moved the head meanwhile (False then, and nothing
    written).

    The UPDATE takes the head's row lock, held until COMMIT. On PostgreSQL it and everything
    else are one statement (data-modifying CTEs, each reading the UPDATE's row), so the lock
    is held for one round trip and the COMMIT: a worker descheduled between two statements
    no longer keeps every other append of the site waiting (issue 18, point 3).
    """
    take: list[Any] = [
        record.seq, record.hash, frontier, _created_at(record), head.site_id, head.last_seq
    ]  # fmt: skip
    if connection.vendor != "postgresql":  # SQLite: its writers are serialised anyway
        with sql.cursor() as cursor:
            cursor.execute(_TAKE_HEAD, take)
            won = cursor.rowcount == 1
            for write in writes if won else ():
                cursor.execute(write.alone, write.params)
        if won:
            _save(record, nodes)
            _done(writes)
        return won
    won = '"won"'  # the head UPDATE's row: the writes' row source
    carried = "".join(
        f', "w{i}" AS ({write.given.format(source=won)})' for i, write in enumerate(writes)
    )
    with sql.cursor() as cursor:
        cursor.execute(
            # Formatted in: the constants above, the writes' SQL and placeholders; every
            # value is a parameter.
            f'WITH "won" AS ({_TAKE_HEAD} RETURNING "site_id"),'  # noqa: S608
            f' "record" AS ({_INSERT_RECORD_INTO} SELECT {_RECORD_VALUES} FROM "won"'
            ' RETURNING "id"),'
            f' "nodes" AS ({_INSERT_TREE_NODES} SELECT "v".* FROM (VALUES {_node_rows(nodes)})'
            f' AS "v" CROSS JOIN "won"){carried}'
            ' SELECT "id" FROM "record"',
            [
                *take,
                *_record_values(record),
                *_node_values(record, nodes),
                *(value for write in writes for value in write.params),
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return False
    _saved(record, row[0])
    _done(writes)
    return True


def _done(writes: Sequence[sql.Write]) -> None:
    for write in writes:
        if write.done is not None:
            write.done()


def _save(record: AuditRecord, nodes: list[tuple[int, int, str]]) -> None:
    """INSERT ``record`` and its tree nodes, one statement each; ``record`` then reads as
    saved (its id set, ``_state`` no longer adding), as after ``record.save()``."""
    returning = connection.features.can_return_columns_from_insert
    with sql.cursor() as cursor:
        cursor.execute(
            _INSERT_RECORD + (' RETURNING "id"' if returning else ""), _record_values(record)
        )
        pk = cursor.fetchone()[0] if returning else cursor.lastrowid
        cursor.execute(
            f"{_INSERT_TREE_NODES} VALUES {_node_rows(nodes)}", _node_values(record, nodes)
        )
    _saved(record, pk)


def _created_at(record: AuditRecord) -> Any:
    return AuditRecord._meta.get_field("created_at").get_db_prep_value(
        record.created_at, connection
    )


def _record_values(record: AuditRecord) -> list[Any]:
    return [
        record.site_id, record.seq, record.kind, record.payload, record.prev_hash, record.hash,
        record.signature, record.key_id, _created_at(record), record.subject_refund_id,
        record.subject_order_id,
    ]  # fmt: skip


def _node_rows(nodes: list[tuple[int, int, str]]) -> str:
    # grow() always gives the leaf: there is at least one node.
    return ", ".join(["(%s, %s, %s, %s)"] * len(nodes))


def _node_values(record: AuditRecord, nodes: list[tuple[int, int, str]]) -> list[Any]:
    return [value for node in nodes for value in (record.site_id, *node)]


def _saved(record: AuditRecord, pk: int) -> None:
    """``record`` reads as saved, as after ``record.save()``."""
    record.pk = pk
    record._state.adding = False
    record._state.db = connection.alias


def _now_ms() -> datetime:
    now = timezone.now().astimezone(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
