"""Reading the audit log: records of a site, verification, export. All scoped to one site."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from audit import chain, checkpoints, keys, merkle, note, tree
from audit.models import AuditChainHead, AuditRecord
from sill.accounts.models import Site

EXPORT_FORMAT = "sill-audit-export-v1"
PROGRESS_EVERY = 1000
# Records a verification reads per round trip; the stored tree nodes they complete are
# compared in one query per batch, so memory stays bounded however long the log.
RECORDS_PER_BATCH = 2000
CHAIN_FIELDS = ("site_id", "seq", "kind", "payload", "prev_hash", "hash", "signature", "key_id")


def records_for(site: Site, *, kind: str | None = None) -> QuerySet[AuditRecord]:
    records = AuditRecord.objects.filter(site=site)
    if kind is not None:
        records = records.filter(kind=kind)
    return records.order_by("seq")


def records_about(
    *, site: Site, refund_id: str | None = None, order_id: str | None = None
) -> QuerySet[AuditRecord]:
    """The site's records whose body names ``refund_id`` (and/or ``order_id``), in seq order.

    Matched on the subject columns ``append_record`` fills from the body's top-level
    ``refund_id`` / ``order_id``: exact ids, never a substring of the payload. Naming
    neither raises ``ValueError`` (that would be every record of the site).
    """
    if not refund_id and not order_id:
        raise ValueError("records_about needs a refund_id or an order_id")
    records = AuditRecord.objects.filter(site=site)
    if refund_id:
        records = records.filter(subject_refund_id=refund_id)
    if order_id:
        records = records.filter(subject_order_id=order_id)
    return records.order_by("seq")


def record_by_hash(site: Site, hash: str) -> AuditRecord | None:
    return AuditRecord.objects.filter(site=site, hash=hash).first()


def chain_rows_for(site: Site) -> Iterator[dict[str, Any]]:
    """The site's records as :func:`audit.chain.verify_chain` reads them, in seq order."""
    return AuditRecord.objects.filter(site=site).order_by("seq").values(*CHAIN_FIELDS).iterator()


def chain_verification(
    site: Site,
    *,
    checkpoint_note: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> chain.VerifyResult:
    """Verify ``site``'s whole chain against Sill's keys (and their windows), its chain head,
    its Merkle tree and its signed checkpoints.

    The checkpoints: ``checkpoint_note`` when given (one kept outside Sill), the latest Sill
    signed (its signed note, which must verify and say what the columns beside it say: the
    note is what outsiders are served), and those published to ``SILL_AUDIT_CHECKPOINT_DIR``
    when there are any, the latest pointer and the largest ``checkpoints/<size>`` (copies
    outside the database: what catches someone who removed records from the end, rewound the
    head and deleted Sill's checkpoint rows, or grew the log anew past a pointer put back). A
    log with fewer records than one counts, or whose first records hash to another root, fails;
    so does a checkpoint signed (by its timed line) before the last record it counts, or outside
    its key's window (:func:`audit.checkpoints.open_checkpoint`); so does a chain head, or a
    stored tree node (those that serve inclusion and consistency proofs), that disagrees with
    the records. Each record's unsigned columns (``created_at``, the subjects) must say what its
    payload says.
    ``progress(n)`` is told every :data:`PROGRESS_EVERY` records how many passed so far.
    """
    head_row = AuditChainHead.objects.filter(site=site).first()
    head = (head_row.last_seq, head_row.last_hash) if head_row else (0, chain.GENESIS_HASH)
    windows = keys.key_windows()
    anchors = _checkpoint_anchors(site, checkpoint_note)
    if isinstance(anchors, chain.VerifyResult):
        return anchors
    grown = _TreeOfRecords(site.pk, {size for _, size, _, _ in anchors}, progress)
    rows = (
        AuditRecord.objects.filter(site=site)
        .order_by("seq")
        .values(*CHAIN_FIELDS, "created_at", *(column for column, _ in chain.SUBJECT_COLUMNS))
        .iterator(chunk_size=RECORDS_PER_BATCH)
    )
    result = chain.verify_chain(
        grown.watch(rows),
        {key_id: w.public_key for key_id, w in windows.items()},
        windows={key_id: (w.valid_from, w.valid_until) for key_id, w in windows.items()},
        expected_head=head,
    )
    if not result.ok:
        return result
    for what, size, root, signed_at in anchors:
        if result.count < size:
            return chain.VerifyResult(
                False,
                result.count,
                result.count + 1,
                f"the log ends at seq {result.count} but {what} counts {size} "
                "records: records were removed from its end",
            )
        if grown.at_anchor.get(size) != root:
            whose = f"{what}'s root" if what.endswith("checkpoint") else f"the root of {what}"
            return chain.VerifyResult(
                False, result.count, None, f"the first {size} records do not hash to {whose}"
            )
        # Its time is its key's word (a retired key could time one whenever it likes): a
        # checkpoint cannot count a record made after it was signed. Whole seconds, rounded
        # down, against the time of the last record it counts (the log's time never goes back).
        newest = grown.time_at_anchor.get(size)
        if signed_at is not None and newest is not None:
            counted = chain.parse_recorded_at(newest)
            if signed_at < counted.replace(microsecond=0):
                return chain.VerifyResult(
                    False,
                    result.count,
                    None,
                    f"{what} was signed at {signed_at:%Y-%m-%d %H:%M:%S} UTC, before seq "
                    f"{size}'s recorded_at {newest}, which it counts",
                )
    if head_row is not None:
        try:
            edge = tree.parse_frontier(head_row.tree_frontier)
        except ValueError:
            return chain.VerifyResult(
                False, result.count, None, "the chain head's tree edge is corrupt (not hex)"
            )
        if tree.root_from_frontier(edge) != grown.root():
            return chain.VerifyResult(
                False, result.count, None, "the stored Merkle tree does not match the records"
            )
    if grown.stored_mismatch is not None:
        return chain.VerifyResult(False, result.count, None, grown.stored_mismatch)
    return result


def _checkpoint_anchors(
    site: Site, checkpoint_note: str | None
) -> list[tuple[str, int, bytes, datetime | None]] | chain.VerifyResult:
    """``(what, size, root, signed at)`` of each signed checkpoint the log must extend (signed
    at: its timed signature's time, None for one signed before Sill timed them), or the failed
    result that one of them does not verify."""
    anchors: list[tuple[str, int, bytes, datetime | None]] = []
    if checkpoint_note is not None:
        try:
            signed = checkpoints.open_checkpoint(
                checkpoint_note, site_id=site.pk, earlier_origin=True
            )
        except note.NoteError as exc:
            return chain.VerifyResult(False, 0, None, f"the checkpoint does not verify: {exc}")
        kept = signed.checkpoint
        anchors.append(("the signed checkpoint", kept.size, kept.root, signed.signed_at))
    latest = checkpoints.latest_checkpoint(site_id=site.pk)
    if latest is not None:
        try:
            root = bytes.fromhex(latest.root_hash)
        except ValueError:
            return chain.VerifyResult(
                False, 0, None, "Sill's latest signed checkpoint root is corrupt (not hex)"
            )
        try:
            signed = checkpoints.open_checkpoint(latest.note, site_id=site.pk, earlier_origin=True)
        except note.NoteError as exc:
            return chain.VerifyResult(
                False, 0, None, f"Sill's latest checkpoint does not verify: {exc}"
            )
        if (signed.checkpoint.size, signed.checkpoint.root) != (latest.tree_size, root):
            return chain.VerifyResult(
                False,
                0,
                None,
                f"Sill's latest checkpoint (at {latest.tree_size} records) does not say what "
                "its signed note says",
            )
        what = "a signed checkpoint" if checkpoint_note is None else "Sill's latest checkpoint"
        anchors.append((what, latest.tree_size, root, signed.signed_at))
    published = checkpoints.published_checkpoint(site_id=site.pk)
    if published is not None:
        try:
            signed = checkpoints.open_checkpoint(published, site_id=site.pk, earlier_origin=True)
        except note.NoteError as exc:
            return chain.VerifyResult(
                False, 0, None, f"the published checkpoint does not verify: {exc}"
            )
        anchors.append(
            (
                "the published checkpoint",
                signed.checkpoint.size,
                signed.checkpoint.root,
                signed.signed_at,
            )
        )
    # The largest checkpoint published for a size (written once, unlike the latest pointer): a
    # log that forks from it, under a pointer put back to an older checkpoint, is seen here. The
    # smaller ones need no reading: Sill signs no tree that does not extend the largest
    # (checkpoints.write_checkpoint), so each is a prefix of it; reading them all would cost a
    # signature check per checkpoint ever published (one every few minutes, for years).
    for name in checkpoints.published_sizes(site_id=site.pk)[-1:]:
        what = f"the checkpoint published as checkpoints/{name}"
        text = checkpoints.published_checkpoint_at(site_id=site.pk, name=name)
        if text is None:  # removed while this ran
            continue
        try:
            signed = checkpoints.open_checkpoint(text, site_id=site.pk, earlier_origin=True)
        except note.NoteError as exc:
            return chain.VerifyResult(False, 0, None, f"{what} does not verify: {exc}")
        if str(signed.checkpoint.size) != name:
            return chain.VerifyResult(
                False, 0, None, f"{what} counts {signed.checkpoint.size} records"
            )
        anchors.append((what, signed.checkpoint.size, signed.checkpoint.root, signed.signed_at))
    return anchors


class _TreeOfRecords:
    """Grows the tree over the records as they are verified: its root at each of
    ``anchor_sizes`` (checkpoints' sizes) and at the end, and whether ``site_id``'s stored
    nodes are the nodes the records make (``stored_mismatch`` names the first that is not;
    None while all are).

    The stored nodes are what Sill's proofs are built from: a changed one the frontier no
    longer holds would pass every other check while the proofs Sill serves fail for an
    outsider. They are compared a batch of records at a time (one query each)."""

    def __init__(
        self,
        site_id: str,
        anchor_sizes: set[int],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.site_id = site_id
        self.anchor_sizes = anchor_sizes
        self.progress = progress
        self.edge: list[bytes] = []
        self.size = 0
        self.at_anchor: dict[int, bytes] = {}
        # The recorded_at (as written) of the record at each anchor size: the newest it counts.
        self.time_at_anchor: dict[int, str] = {}
        self.last_hash: str | None = None
        self.stored_mismatch: str | None = None
        # The nodes the records since ``_batch_start`` completed: (level, index) → hex.
        self._batch_start = 0
        self._batch_nodes: dict[tuple[int, int], str] = {}

    def watch(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            yield row
            # Reached only for a record that verified (verify_chain stops at the first bad).
            nodes, self.edge = tree.grow(
                self.edge, self.size, merkle.record_leaf_hash(row["payload"])
            )
            self._batch_nodes.update(((level, index), node.hex()) for level, index, node in nodes)
            self.size += 1
            self.last_hash = row["hash"]
            if self.size in self.anchor_sizes:
                self.at_anchor[self.size] = tree.root_from_frontier(self.edge)
                self.time_at_anchor[self.size] = json.loads(row["payload"])["recorded_at"]
            if self.size % RECORDS_PER_BATCH == 0:
                self._compare_stored()
            if self.progress is not None and self.size % PROGRESS_EVERY == 0:
                self.progress(self.size)
        self._compare_stored()

    def _compare_stored(self) -> None:
        if self._batch_nodes and self.stored_mismatch is None:
            stored = tree.stored_nodes_completed_by(self.site_id, self._batch_start, self.size)
            for (level, index), node in self._batch_nodes.items():  # in the order made
                if stored.get((level, index)) != node:
                    self.stored_mismatch = (
                        f"the stored Merkle tree's node at level {level}, index {index} does "
                        "not match the records"
                    )
                    break
        self._batch_start = self.size
        self._batch_nodes.clear()

    def root(self) -> bytes:
        return tree.root_from_frontier(self.edge)


def export_lines(site: Site) -> Iterator[str]:
    """JSON lines: a header with the audit keys and their windows, one line per record in seq
    order, and last a signed checkpoint of exactly those records.

    Writes a checkpoint first when the log grew since the last one, so the export ends with a
    signed count of what it holds: a file cut short loses that last line (or no longer
    reaches its count), which ``audit/verify_export.py`` reports.
    """
    with contextlib.suppress(checkpoints.CheckpointInconsistent):
        checkpoints.write_checkpoint(site=site)  # an inconsistent log exports without one
    latest = checkpoints.latest_checkpoint(site_id=site.pk)
    header = {
        "type": "header",
        "format": EXPORT_FORMAT,
        "site_id": site.pk,
        "origin": checkpoints.origin_for(site.pk),
        **key_listing(),
    }
    yield json.dumps(header, ensure_ascii=False)
    rows = chain_rows_for(site)
    if latest is not None:
        rows = (row for row in rows if row["seq"] <= latest.tree_size)
    for row in rows:
        yield json.dumps({"type": "record", **row}, ensure_ascii=False)
    if latest is not None:
        yield json.dumps({"type": "checkpoint", "note": latest.note}, ensure_ascii=False)


def key_listing() -> dict[str, Any]:
    """The audit keys as exports and bundles carry them: ``public_keys`` (key id → base64url)
    and ``key_windows`` (key id → ``valid_from`` / ``valid_until``, ISO or null; a rotated
    key's also ``endorsement`` and ``endorsed_by``, what lets a verifier that pinned the
    configured key trust it)."""
    windows = keys.key_windows()
    return {
        "public_keys": {key_id: chain.b64url_encode(w.public_key) for key_id, w in windows.items()},
        "key_windows": {key_id: window_listing(w) for key_id, w in windows.items()},
    }


def window_listing(window: keys.KeyWindow) -> dict[str, Any]:
    """A key's window as Sill publishes it (exports, bundles, the well-known key list)."""
    listed: dict[str, Any] = {
        "valid_from": window.valid_from.isoformat() if window.valid_from else None,
        "valid_until": window.valid_until.isoformat() if window.valid_until else None,
    }
    if window.endorsement is not None:
        listed["endorsement"] = window.endorsement
        listed["endorsed_by"] = window.endorsed_by
    return listed
