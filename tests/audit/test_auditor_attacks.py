"""An outside auditor's attacks on the audit log, and an insider's who wants to hide or alter a
refund: each is run against `audit verify` / Activity's check (chain_verification) and the
standalone verifier (audit/verify_export.py), and each must be caught, or pass only where
that is what the evidence honestly shows (a genuine earlier state of the log).

Attacks already covered elsewhere are not repeated here: a payload, hash, signature or kind
byte changed, a middle record deleted, two records swapped (tests/audit/test_tamper.py), an
export cut short, reordered or holding a record twice (test_checkpoints.py), a retired key
signing by backdating (test_key_order.py), key rows written into the database and edited
endorsements (test_key_endorsement.py), C2SP note and Merkle vectors (test_note.py,
test_merkle_vectors.py).
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import unicodedata
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from django.apps import apps
from django.db import transaction
from django.utils import timezone

from audit import bundles, chain, checkpoints, keys, merkle, note, verify_export
from audit.models import (
    AuditChainHead,
    AuditCheckpoint,
    AuditKey,
    AuditKind,
    AuditRecord,
    AuditTreeNode,
)
from audit.selectors import chain_verification
from audit.services import append_record
from sill.accounts.models import Site
from tests.audit.test_tamper import (
    column,
    export,
    run_standalone,
    set_column,
    sql,
    verify_command,
)

pytestmark = pytest.mark.django_db

TABLE = AuditRecord._meta.db_table


def refund(site: Site, refund_id: str, amount_minor: int = 8900, actor: str = "owner@x") -> None:
    with transaction.atomic():
        append_record(
            site=site,
            kind=AuditKind.SETTLEMENT,
            body={
                "refund_id": refund_id,
                "amount_minor": amount_minor,
                "currency": "USD",
                "actor": actor,
            },
        )


def refunds(site: Site, n: int) -> None:
    for i in range(1, n + 1):
        refund(site, f"rf_{i}")


def anchor() -> tuple[str, nacl.signing.SigningKey]:
    return keys.configured_key()


def pinned_anchor() -> dict[str, Any]:
    key_id, key = anchor()
    return {key_id: key.verify_key}


def standalone(
    path: Path, *, trusted: dict[str, Any] | None = None, checkpoint: str | None = None
) -> list[str]:
    """The standalone verifier's problems for ``path`` (in-process: the same module a copy
    run without Sill executes; run_standalone runs it isolated where that matters)."""
    _, _, problems = verify_export.verify_path(str(path), trusted, checkpoint)
    return problems


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(line for line in lines if line) + "\n", encoding="utf-8")


def resign_record(
    rec: dict[str, Any], payload: dict[str, Any], prev_hash: str, key: nacl.signing.SigningKey
) -> dict[str, Any]:
    text = chain.canonical(payload)
    digest = chain.record_hash(prev_hash, text)
    return {
        **rec,
        "payload": text.decode("utf-8"),
        "prev_hash": prev_hash,
        "hash": digest,
        "signature": chain.sign_hash(digest, key),
        "key_id": keys.key_id_for(key.verify_key),
    }


def signed_checkpoint(origin: str, payloads: list[str], key: nacl.signing.SigningKey) -> str:
    root = merkle.root_of([merkle.record_leaf_hash(p) for p in payloads])
    text = note.Checkpoint(origin=origin, size=len(payloads), root=root).text()
    return note.sign(text, name=origin, signing_key=key)


# -- a record's body changed -----------------------------------------------------------------


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "amount": lambda body: body.update(amount_minor=1),
    "refund id": lambda body: body.update(refund_id="rf_someone_else"),
    "actor": lambda body: body.update(actor="nobody@x"),
}


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("how", ["rehashed, old signature", "rehashed, signed by another key"])
def test_a_body_edit_with_its_hash_recomputed_fails_at_that_record(
    site: Site, tmp_path: Path, edit: str, how: str
) -> None:
    """The insider rewrites record 3 and every hash after it (so the chain links again) and
    keeps the genuine key id: the signature of record 3 is what gives it away."""
    refunds(site, 5)
    attacker = nacl.signing.SigningKey.generate()
    genuine_key_id = column(site, 3, "key_id")
    prev = column(site, 2, "hash")
    for seq in range(3, 6):
        payload = json.loads(column(site, seq, "payload"))
        if seq == 3:
            EDITS[edit](payload["body"])
        text = chain.canonical(payload)
        digest = chain.record_hash(prev, text)
        signature = (
            column(site, seq, "signature")
            if how == "rehashed, old signature"
            else chain.sign_hash(digest, attacker)
        )
        set_column(site, seq, "hash", f"{seq:064x}")  # (site, hash) is unique
        for name, value in (
            ("payload", text.decode()),
            ("prev_hash", prev),
            ("hash", digest),
            ("signature", signature),
            ("key_id", genuine_key_id),
        ):
            set_column(site, seq, name, value)
        prev = digest
    AuditChainHead.objects.filter(site=site).update(last_hash=prev)

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 3: signature does not verify" in err

    problems = standalone(export(site, tmp_path / "e.jsonl"), trusted=pinned_anchor())
    assert problems[0] == "FAILED at seq 3: signature does not verify", problems


def test_a_forged_export_with_the_genuine_key_id_bound_to_the_attackers_key_fails_pinned(
    site: Site, tmp_path: Path
) -> None:
    """The attacker controls the whole file: they swap the public key listed under Sill's key
    id for their own and re-sign records and checkpoint. Consistent, so it passes unpinned
    (the verifier says the file's keys prove only consistency); pinned, it fails."""
    refunds(site, 3)
    path = export(site, tmp_path / "e.jsonl")
    lines = lines_of(path)
    header = json.loads(lines[0])
    key_id = next(iter(header["public_keys"]))
    attacker = nacl.signing.SigningKey.generate()
    header["public_keys"][key_id] = chain.b64url_encode(bytes(attacker.verify_key))
    records = [json.loads(line) for line in lines[1:4]]
    forged, prev = [], chain.GENESIS_HASH
    for rec in records:
        payload = json.loads(rec["payload"])
        payload["body"]["amount_minor"] = 1
        new = resign_record(rec, payload, prev, attacker)
        new["key_id"] = key_id
        forged.append(new)
        prev = new["hash"]
    checkpoint = signed_checkpoint(header["origin"], [r["payload"] for r in forged], attacker)
    write_lines(
        path,
        [
            json.dumps(header),
            *(json.dumps(r) for r in forged),
            json.dumps({"type": "checkpoint", "note": checkpoint}),
        ],
    )

    assert standalone(path) == []
    problems = standalone(path, trusted=pinned_anchor())
    assert problems[0] == "FAILED at seq 1: signature does not verify", problems
    assert any("the export's checkpoint" in p and "known key" in p for p in problems)


# -- records removed, renumbered, spliced ------------------------------------------------------


def test_an_export_cut_back_to_an_older_genuine_checkpoint_fails_only_against_a_newer_one(
    site: Site, tmp_path: Path
) -> None:
    """Records 4 and 5 dropped and the genuine checkpoint at 3 (public, at
    /audit/<site>/checkpoint/3) put at the end: that is a genuine earlier state of the log, so
    only a checkpoint the auditor kept from later shows the refunds that were taken out."""
    refunds(site, 3)
    older = checkpoints.write_checkpoint(site=site)
    refunds(site, 2)
    newer = checkpoints.write_checkpoint(site=site)
    assert older is not None and newer is not None
    path = export(site, tmp_path / "e.jsonl")
    lines = lines_of(path)
    write_lines(path, [*lines[:4], json.dumps({"type": "checkpoint", "note": older.note})])

    assert standalone(path, trusted=pinned_anchor()) == []
    problems = standalone(path, trusted=pinned_anchor(), checkpoint=newer.note)
    assert problems == [
        "FAILED at the trusted checkpoint: it counts 5 records, the file holds 3: records were "
        "removed from the end"
    ]


def test_records_renumbered_over_a_deleted_one_fail(site: Site, tmp_path: Path) -> None:
    """Record 3 deleted and 4, 5 moved down to close the gap, the head rewound to match."""
    refunds(site, 5)
    sql(f"DELETE FROM {TABLE} WHERE site_id = %s AND seq = 3", site.pk)
    set_column(site, 4, "seq", 3)
    set_column(site, 5, "seq", 4)
    AuditChainHead.objects.filter(site=site).update(last_seq=4)

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 3: payload seq 4 != record 3" in err
    problems = standalone(export(site, tmp_path / "e.jsonl"))
    assert problems[0] == "FAILED at seq 3: payload seq 4 != record 3", problems


def test_a_record_spliced_in_from_another_site_fails(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    """Every site's records are signed by the same key: a genuine refund of another site is
    moved into this site's chain (as the database row, and as a line of the export)."""
    refunds(site, 3)
    refunds(other_site, 2)
    path = export(site, tmp_path / "e.jsonl")
    other_path = export(other_site, tmp_path / "other.jsonl")

    donor = AuditRecord.objects.get(site=other_site, seq=2)
    sql(
        f"UPDATE {TABLE} SET site_id = %s, seq = 4, prev_hash = %s WHERE id = %s",
        site.pk,
        column(site, 3, "hash"),
        donor.pk,
    )
    AuditChainHead.objects.filter(site=site).update(last_seq=4, last_hash=donor.hash)
    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 4: payload site_id " in err

    lines, spliced = lines_of(path), json.loads(lines_of(other_path)[2])
    for relabel in (False, True):
        if relabel:
            spliced["site_id"] = site.pk
        spliced["seq"] = 4
        write_lines(path, [*lines[:4], json.dumps(spliced), lines[4]])
        problems = standalone(path)
        expected = "payload site_id" if relabel else f"record belongs to site {other_site.pk}"
        assert problems[0].startswith(f"FAILED at seq 4: {expected}"), problems


def test_another_sites_whole_export_fails_against_this_sites_checkpoint(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    """Handed another site's (genuine) export as this site's: the file is consistent, so only
    this site's checkpoint (or the site id the verifier prints) tells them apart."""
    refunds(site, 2)
    refunds(other_site, 2)
    mine = checkpoints.write_checkpoint(site=site)
    assert mine is not None
    path = export(other_site, tmp_path / "other.jsonl")
    with pytest.raises(verify_export.WrongInput) as wrong:  # never OK; and named for what it is
        standalone(path, trusted=pinned_anchor(), checkpoint=mine.note)
    assert str(wrong.value).startswith(
        f"WRONG INPUT: --checkpoint: a checkpoint of log {checkpoints.origin_for(site.pk)}, and "
        f"{path} is of log {checkpoints.origin_for(other_site.pk)}: not the same log"
    )


# -- checkpoints: older, forked ------------------------------------------------------------------


def test_an_older_checkpoint_kept_by_the_auditor_still_verifies(site: Site, tmp_path: Path) -> None:
    refunds(site, 3)
    older = checkpoints.write_checkpoint(site=site)
    refunds(site, 2)
    assert older is not None
    (tmp_path / "cp").write_text(older.note)

    out, _, error = verify_command("--site", site.pk, "--checkpoint", str(tmp_path / "cp"))
    assert error is None and "5 records OK" in out
    path = export(site, tmp_path / "e.jsonl")
    assert standalone(path, trusted=pinned_anchor(), checkpoint=older.note) == []


def test_a_forked_checkpoint_of_the_same_size_fails(site: Site, tmp_path: Path) -> None:
    """Two signed heads for the same size: the log matches at most one of them. (Sill never
    signs a fork; this is one made with its key, to see the verifiers refuse it.)"""
    refunds(site, 4)
    genuine = checkpoints.write_checkpoint(site=site)
    assert genuine is not None
    payloads = list(AuditRecord.objects.filter(site=site).values_list("payload", flat=True))
    payloads[2] = payloads[2].replace("rf_3", "rf_X")
    fork = signed_checkpoint(checkpoints.origin_for(site.pk), payloads, anchor()[1])
    assert note.parse_checkpoint(fork.split("\n\n")[0] + "\n").size == genuine.tree_size
    (tmp_path / "fork").write_text(fork)

    _, err, error = verify_command("--site", site.pk, "--checkpoint", str(tmp_path / "fork"))
    assert error is not None
    assert "the first 4 records do not hash to the signed checkpoint's root" in err
    problems = standalone(export(site, tmp_path / "e.jsonl"), checkpoint=fork)
    assert problems == [
        "FAILED at the trusted checkpoint: the first 4 records do not hash to its root: records "
        "were changed, inserted, removed or reordered"
    ]


def test_a_checkpoint_of_another_sites_log_is_refused(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    refunds(site, 2)
    refunds(other_site, 2)
    theirs = checkpoints.write_checkpoint(site=other_site)
    assert theirs is not None
    (tmp_path / "cp").write_text(theirs.note)

    _, err, error = verify_command("--site", site.pk, "--checkpoint", str(tmp_path / "cp"))
    # The auditor's file is wrong, not the log: told so apart (exit 2, tests/audit/test_wrong_input.py).
    assert error is not None and error.returncode == 2 and err == ""
    assert f"a checkpoint of log {checkpoints.origin_for(other_site.pk)}, not of site" in str(error)
    with pytest.raises(verify_export.WrongInput, match="a checkpoint of log"):
        standalone(export(site, tmp_path / "e.jsonl"), checkpoint=theirs.note)


def test_verify_reads_the_checkpoint_sill_signed_not_the_columns_beside_it(site: Site) -> None:
    """The public endpoint serves the note; `Verify chain` checked the unsigned tree_size and
    root_hash columns. A note replaced by one Sill never signed (what outsiders are then
    served) must not pass as verified."""
    refunds(site, 3)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    stranger = nacl.signing.SigningKey.generate()
    payloads = list(AuditRecord.objects.filter(site=site).values_list("payload", flat=True))
    forged = signed_checkpoint(checkpoints.origin_for(site.pk), payloads, stranger)
    AuditCheckpoint.objects.filter(pk=signed.pk).update(note=forged)

    result = chain_verification(site)
    assert not result.ok
    assert result.problem.startswith("Sill's latest checkpoint does not verify"), result.problem


def test_verify_reads_the_checkpoint_note_for_its_size_and_root(site: Site) -> None:
    refunds(site, 3)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    # The genuine note kept, its columns lowered (as if to hide a truncation to 2 records).
    AuditCheckpoint.objects.filter(pk=signed.pk).update(tree_size=2)

    result = chain_verification(site)
    assert not result.ok
    assert "does not say what its signed note says" in result.problem, result.problem


# -- truncation hidden inside the database, caught by the published checkpoint ------------------


def truncate_and_clean(site: Site, keep: int) -> None:
    """Everything someone with database access can do to hide the last records: delete them,
    rewind the head and the stored tree, and delete Sill's own checkpoints."""
    last = AuditRecord.objects.get(site=site, seq=keep)
    sql(f"DELETE FROM {TABLE} WHERE site_id = %s AND seq > %s", site.pk, keep)
    AuditChainHead.objects.filter(site=site).update(last_seq=keep, last_hash=last.hash)
    AuditTreeNode.objects.filter(site=site).delete()
    AuditChainHead.objects.filter(site=site).update(tree_frontier="")
    importlib.import_module("audit.migrations.0006_merkle_tree").build_trees(apps, None)
    AuditCheckpoint.objects.filter(site=site).delete()


def publish_one(site: Site) -> AuditCheckpoint:
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    assert checkpoints.publish_checkpoint(signed.pk)
    return signed


def test_verify_chain_catches_a_truncation_against_the_published_checkpoint(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    """Sill publishes each checkpoint to SILL_AUDIT_CHECKPOINT_DIR so a copy lives outside its
    database; Activity's check (and `audit verify` without --checkpoint) read only the
    database, so a cleaned-up truncation passed them although the published copy shows it."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 6)
    publish_one(site)
    truncate_and_clean(site, 4)

    result = chain_verification(site)
    assert not result.ok
    assert result.first_bad_seq == 5
    assert "published checkpoint" in result.problem
    assert "records were removed from its end" in result.problem
    _, err, error = verify_command("--site", site.pk)
    assert error is not None and f"site {site.pk}: FAILED at seq 5: " in err


def test_a_rewritten_log_is_not_signed_over_the_published_checkpoint(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    """After the truncation, new records bring the log back past its old size: Sill would sign
    a checkpoint (and publish it as the latest) that forks from the one it published before."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 6)
    published = publish_one(site)
    truncate_and_clean(site, 4)
    refunds(site, 3)

    with pytest.raises(checkpoints.CheckpointInconsistent, match="published checkpoint"):
        checkpoints.write_checkpoint(site=site)
    assert (tmp_path / site.pk / "checkpoint").read_text() == published.note
    assert not AuditCheckpoint.objects.filter(site=site).exists()


def test_a_genuine_log_verifies_and_grows_against_its_published_checkpoints(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 3)
    publish_one(site)
    refunds(site, 2)
    assert chain_verification(site).ok  # the log grew past the published checkpoint
    publish_one(site)
    refunds(site, 1)
    result = chain_verification(site)
    assert result.ok and result.count == 6


def test_a_renamed_origin_keeps_its_earlier_checkpoints_as_anchors(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    """SILL_AUDIT_ORIGIN ships as a placeholder the README asks operators to set to their host.
    Once checkpoints were read as signed notes, the first one under the old name no longer
    opened under the new one: every beat refused to sign ("does not verify") and Verify chain
    failed, for a log nobody touched. A note names the log it was signed for; one of this
    site's (under any earlier name) by Sill's key is still an anchor the log must extend."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 3)
    publish_one(site)
    settings.SILL_AUDIT_ORIGIN = "refunds.merchant.example/audit"
    refunds(site, 2)

    assert chain_verification(site).ok
    signed = publish_one(site)  # signed and published under the new name
    assert signed.note.startswith(f"refunds.merchant.example/audit/{site.pk}\n5\n")
    assert chain_verification(site).ok


def test_a_checkpoint_under_an_earlier_origin_still_catches_a_truncation(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 3)
    publish_one(site)
    settings.SILL_AUDIT_ORIGIN = "refunds.merchant.example/audit"
    truncate_and_clean(site, 2)

    result = chain_verification(site)
    assert not result.ok and "published checkpoint" in result.problem
    refunds(site, 2)
    with pytest.raises(checkpoints.CheckpointInconsistent, match="published checkpoint"):
        checkpoints.write_checkpoint(site=site)


# -- a published checkpoint is never replaced ------------------------------------------------


def forked_note(site: Site, size: int) -> str:
    """A checkpoint of ``size`` records with record 2 changed, signed with Sill's key (Sill
    never signs one: this is the fork a second Sill publishing to the same directory, or a log
    rewritten behind Sill's back, would bring)."""
    payloads = list(
        AuditRecord.objects.filter(site=site, seq__lte=size)
        .order_by("seq")
        .values_list("payload", flat=True)
    )
    payloads[1] = payloads[1].replace("rf_2", "rf_X")
    return signed_checkpoint(checkpoints.origin_for(site.pk), payloads, anchor()[1])


def test_a_published_checkpoint_is_never_replaced_by_another_of_its_size(
    site: Site, settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`checkpoints/<size>` is a promise to whoever read it. Publishing overwrote it with any
    other note of that size, and moved the latest pointer to it: the evidence of the first view
    was gone. Now the old file stays, the new one is refused (logged, not retried)."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 4)
    genuine = publish_one(site)
    folder = tmp_path / site.pk
    AuditCheckpoint.objects.filter(pk=genuine.pk).delete()  # a database-only intruder
    fork = AuditCheckpoint.objects.create(
        site=site,
        tree_size=4,
        root_hash=note.parse_checkpoint(forked_note(site, 4).split("\n\n")[0] + "\n").root.hex(),
        note=forked_note(site, 4),
        key_id=anchor()[0],
        created_at=timezone.now(),
    )

    with caplog.at_level(logging.ERROR, logger="audit.checkpoints"):
        assert not checkpoints.publish_checkpoint(fork.pk)
    assert (folder / "checkpoints" / "4").read_text() == genuine.note
    assert (folder / "checkpoint").read_text() == genuine.note
    fork.refresh_from_db()
    assert fork.published_at is None
    assert "already holds another checkpoint of 4 records" in fork.last_publish_error
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("already holds another checkpoint of 4 records" in m for m in logged), logged
    assert checkpoints.publish_pending() == 0  # nothing a retry would change: an operator looks
    assert (folder / "checkpoints" / "4").read_text() == genuine.note


def test_publishing_the_same_checkpoint_again_leaves_the_file_as_it_is(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    """A retry (the URL failed, or the task ran twice) meets its own file: that is no fork."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 3)
    signed = publish_one(site)
    AuditCheckpoint.objects.filter(pk=signed.pk).update(published_at=None)
    assert checkpoints.publish_checkpoint(signed.pk)
    assert (tmp_path / site.pk / "checkpoints" / "3").read_text() == signed.note
    assert [p.name for p in (tmp_path / site.pk / "checkpoints").iterdir()] == ["3"]


def test_the_same_tree_signed_again_by_a_rotated_key_keeps_the_published_file(
    site: Site, settings: Any, tmp_path: Path, switch_now: None
) -> None:
    """Another note, the same tree: the file says what the new note says (kept, no error)."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 3)
    first = publish_one(site)
    AuditCheckpoint.objects.filter(pk=first.pk).delete()
    rotate()
    again = checkpoints.write_checkpoint(site=site)
    assert again is not None and again.note != first.note and again.root_hash == first.root_hash
    assert checkpoints.publish_checkpoint(again.pk)
    assert (tmp_path / site.pk / "checkpoints" / "3").read_text() == first.note
    assert chain_verification(site).ok


def test_verify_chain_reports_a_log_forked_from_a_checkpoint_published_for_its_size(
    site: Site, settings: Any, tmp_path: Path
) -> None:
    """The latest pointer (`checkpoint`) is replaced at every publish, so it cannot be kept
    write-once: someone who can write it and the database puts an older genuine checkpoint back
    there, cuts the log back to that size and lets other records grow it again. Verify chain
    read only the pointer (which the new log extends), so it passed; Sill signed the new log and
    published it over `checkpoints/4`. The per-size files it published are anchors too now."""
    settings.SILL_AUDIT_CHECKPOINT_DIR = str(tmp_path)
    refunds(site, 2)
    older = publish_one(site)
    refunds(site, 2)
    genuine = publish_one(site)
    folder = tmp_path / site.pk
    truncate_and_clean(site, 2)
    (folder / "checkpoint").write_text(older.note)
    refund(site, "rf_3", amount_minor=1)
    refund(site, "rf_4", amount_minor=1)

    result = chain_verification(site)
    assert not result.ok
    assert result.problem == (
        "the first 4 records do not hash to the root of the checkpoint published as checkpoints/4"
    ), result.problem
    _, err, error = verify_command("--site", site.pk)
    assert error is not None and "checkpoints/4" in err
    with pytest.raises(checkpoints.CheckpointInconsistent, match="checkpoints/4"):
        checkpoints.write_checkpoint(site=site)
    assert (folder / "checkpoints" / "4").read_text() == genuine.note
    assert not AuditCheckpoint.objects.filter(site=site).exists()


# -- key rotation -----------------------------------------------------------------------------


@pytest.fixture
def switch_now(settings: Any) -> None:
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0


def rotate() -> keys.KeyWindow:
    window = keys.rotate_key()
    assert window.valid_from is not None
    while timezone.now() < window.valid_from:
        time.sleep(0.001)
    return window


def test_a_retired_key_cannot_sign_past_its_window_by_editing_the_export_header(
    site: Site, switch_now: None, tmp_path: Path
) -> None:
    """Someone holding a retired rotated key (a leaked backup and the SECRET_KEY of its day)
    re-signs the records its successor signed, and the export's checkpoint. The header's
    ``valid_until`` is not endorsed: cleared, it let the retired key sign on for ever."""
    refund(site, "rf_1")  # the configured key
    first = rotate()
    refund(site, "rf_2")  # first rotated key
    second = rotate()
    refund(site, "rf_3", amount_minor=8900)  # second rotated key
    refund(site, "rf_4")
    assert [r.key_id for r in AuditRecord.objects.filter(site=site)][2:] == [second.key_id] * 2
    path = export(site, tmp_path / "e.jsonl")
    assert standalone(path, trusted=pinned_anchor()) == []

    retired = keys._unseal(AuditKey.objects.get(key_id=first.key_id))
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["key_windows"][first.key_id]["valid_until"] = None
    records = [json.loads(line) for line in lines[1:5]]
    prev = records[1]["hash"]
    for i in (2, 3):
        payload = json.loads(records[i]["payload"])
        payload["body"]["amount_minor"] = 89000  # ten times the refund
        records[i] = resign_record(records[i], payload, prev, retired)
        prev = records[i]["hash"]
    checkpoint = signed_checkpoint(header["origin"], [r["payload"] for r in records], retired)
    write_lines(
        path,
        [
            json.dumps(header),
            *(json.dumps(r) for r in records),
            json.dumps({"type": "checkpoint", "note": checkpoint}),
        ],
    )

    problems = standalone(path, trusted=pinned_anchor())
    assert problems and problems[0].startswith(f"FAILED at seq 3: signed by {first.key_id} at "), (
        problems
    )
    assert "outside its window" in problems[0]
    # The same, isolated from Sill, as an auditor runs it.
    key_id, key = anchor()
    result = run_standalone(
        tmp_path,
        str(path),
        "--public-key",
        f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}",
    )
    assert result.returncode == 1 and "outside its window" in result.stderr


@pytest.mark.parametrize("window", ["removed", "emptied"])
def test_the_pinned_key_cannot_sign_past_the_first_rotation_by_dropping_its_window(
    site: Site, switch_now: None, tmp_path: Path, window: str
) -> None:
    """Someone holding the configured key (it stays configured after rotations, to endorse)
    re-signs the records a rotated key signed. The header keeps the rotated key (its
    endorsement verifies) but drops the configured key's window, or leaves it without bounds:
    the pinned key then read as a legacy key, valid for ever. Its endorsement of the rotated
    key says when it stopped signing."""
    refund(site, "rf_1")  # the configured key
    rotated = rotate()
    refund(site, "rf_2", amount_minor=8900)  # the rotated key
    refund(site, "rf_3")
    path = export(site, tmp_path / "e.jsonl")
    assert standalone(path, trusted=pinned_anchor()) == []

    anchor_id, configured = anchor()
    lines = lines_of(path)
    header = json.loads(lines[0])
    if window == "removed":
        del header["key_windows"][anchor_id]
    else:
        header["key_windows"][anchor_id] = {"valid_from": None, "valid_until": None}
    records = [json.loads(line) for line in lines[1:4]]
    prev = records[0]["hash"]
    for i in (1, 2):
        payload = json.loads(records[i]["payload"])
        payload["body"]["amount_minor"] = 89000  # ten times the refund
        records[i] = resign_record(records[i], payload, prev, configured)
        prev = records[i]["hash"]
    checkpoint = signed_checkpoint(header["origin"], [r["payload"] for r in records], configured)
    write_lines(
        path,
        [
            json.dumps(header),
            *(json.dumps(r) for r in records),
            json.dumps({"type": "checkpoint", "note": checkpoint}),
        ],
    )

    problems = standalone(path, trusted=pinned_anchor())
    assert problems and problems[0].startswith(f"FAILED at seq 2: signed by {anchor_id} at "), (
        problems
    )
    assert "outside its window" in problems[0]
    assert rotated.key_id in header["public_keys"]  # the successor is still listed


def test_a_record_signed_by_a_key_missing_from_the_published_list_fails(
    site: Site, tmp_path: Path
) -> None:
    refunds(site, 2)
    stranger = nacl.signing.SigningKey.generate()
    path = export(site, tmp_path / "e.jsonl")
    lines = lines_of(path)
    records = [json.loads(line) for line in lines[1:3]]
    records[1] = resign_record(
        records[1], json.loads(records[1]["payload"]), records[0]["hash"], stranger
    )
    write_lines(path, [lines[0], *(json.dumps(r) for r in records), lines[3]])
    problems = standalone(path)
    assert problems[0] == (
        f"FAILED at seq 2: unknown key_id {keys.key_id_for(stranger.verify_key)!r}"
    ), problems


# -- a record's time moved back ------------------------------------------------------------


def backdate(site: Site, seq: int, by: timedelta) -> str:
    """Record ``seq`` timed ``by`` earlier, and it and every record after it hashed and signed
    anew with Sill's own key, the columns beside them, the head and the stored tree made to
    match: what only someone holding the key can do, so every link, signature and root holds.
    Returns the record's new ``recorded_at``."""
    key = anchor()[1]
    prev = column(site, seq - 1, "hash") if seq > 1 else chain.GENESIS_HASH
    last = AuditChainHead.objects.get(site=site).last_seq
    moved = ""
    for n in range(seq, last + 1):
        payload = json.loads(column(site, n, "payload"))
        if n == seq:
            at = chain.parse_recorded_at(payload["recorded_at"]) - by
            moved = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
            payload["recorded_at"] = moved
        text = chain.canonical(payload).decode()
        digest = chain.record_hash(prev, text.encode())
        set_column(site, n, "hash", f"{n:064x}")  # (site, hash) is unique
        for name, value in (
            ("payload", text),
            ("prev_hash", prev),
            ("hash", digest),
            ("signature", chain.sign_hash(digest, key)),
            ("created_at", chain.parse_recorded_at(payload["recorded_at"])),
        ):
            set_column(site, n, name, value)
        prev = digest
    AuditChainHead.objects.filter(site=site).update(last_hash=prev, tree_frontier="")
    AuditTreeNode.objects.filter(site=site).delete()
    importlib.import_module("audit.migrations.0006_merkle_tree").build_trees(apps, None)
    return moved


def recorded_at(site: Site, seq: int) -> str:
    return str(json.loads(column(site, seq, "payload"))["recorded_at"])


def test_a_record_moved_back_in_time_and_re_signed_fails_at_its_seq(
    site: Site, tmp_path: Path
) -> None:
    """An insider with Sill's key moves refund 3 an hour back (out of the day an auditor
    filters Activity by, say) and re-signs the log from there. Every hash, signature and root
    holds; only the time going backwards along the chain, which append_record never writes,
    shows it."""
    refunds(site, 5)
    moved = backdate(site, 3, timedelta(hours=1))
    problem = f"recorded_at {moved} is before seq 2's {recorded_at(site, 2)}: the log's time went backwards"

    result = chain_verification(site)
    assert (result.ok, result.first_bad_seq, result.problem) == (False, 3, problem)
    _, err, error = verify_command("--site", site.pk)
    assert error is not None and f"site {site.pk}: FAILED at seq 3: {problem}" in err

    path = export(site, tmp_path / "e.jsonl")
    assert standalone(path, trusted=pinned_anchor()) == [f"FAILED at seq 3: {problem}"]
    key_id, key = anchor()
    isolated = run_standalone(
        tmp_path,
        str(path),
        "--public-key",
        f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}",
    )
    assert isolated.returncode == 1 and isolated.stderr.startswith(f"FAILED at seq 3: {problem}")


def test_a_refunds_later_record_moved_before_its_earlier_one_fails_its_bundle(
    site: Site,
) -> None:
    """The same in one refund's evidence: its later record timed before its earlier one."""
    refund(site, "rf_1")
    refund(site, "rf_2")
    refund(site, "rf_1", amount_minor=100)
    moved = backdate(site, 3, timedelta(hours=1))

    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    assert [r["seq"] for r in bundle["records"]] == [1, 3]
    _, problems = verify_export.verify_bundle(bundle, pinned_anchor(), None)
    assert problems == [
        f"FAILED at seq 3: recorded_at {moved} is before seq 1's {recorded_at(site, 1)}: the "
        "log's time went backwards"
    ]


def test_records_timed_in_the_same_millisecond_pass(site: Site, tmp_path: Path) -> None:
    """Equal times are no step back: append_record gives a record its predecessor's time when
    this host's clock is behind."""
    refunds(site, 3)
    gap = [chain.parse_recorded_at(recorded_at(site, seq)) for seq in (2, 3)]
    backdate(site, 3, gap[1] - gap[0])
    assert recorded_at(site, 3) == recorded_at(site, 2)
    assert chain_verification(site).ok
    assert standalone(export(site, tmp_path / "e.jsonl"), trusted=pinned_anchor()) == []


# -- canonicalisation: the app and the standalone verifier must agree ---------------------------

BODIES: dict[str, dict[str, Any]] = {
    "NFC text": {"note": unicodedata.normalize("NFC", "Café Ångström")},
    "NFD text": {"note": unicodedata.normalize("NFD", "Café Ångström")},
    "both forms as keys": {
        unicodedata.normalize("NFC", "é"): 1,
        unicodedata.normalize("NFD", "é"): 2,
    },
    "astral and high-BMP keys": {"\U0001f600": 1, "\ufb01": 2, "\ue000": 3, "a": 4},
    "control characters": {"note": "tab\there\x01\x1f\x7f"},
    "escapes JSON keeps": {"note": 'quote " backslash \\ slash /'},
    "edge integers": {"max": 2**53 - 1, "min": -(2**53 - 1), "zero": 0, "neg": -1},
    "deep and empty": {"a": [[], {}, [None, True, False, ""]]},
}


@pytest.mark.parametrize("name", BODIES)
def test_the_app_and_the_standalone_verifier_agree_on_unusual_bodies(
    site: Site, tmp_path: Path, name: str
) -> None:
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.REASON_CHANGE, body=BODIES[name])
    refunds(site, 1)
    assert chain_verification(site).ok
    result = run_standalone(tmp_path, str(export(site, tmp_path / "e.jsonl")))
    assert result.returncode == 0, result.stderr
    body = json.loads(AuditRecord.objects.get(site=site, seq=1).payload)["body"]
    assert body == BODIES[name]  # stored exactly, never normalised


def test_a_body_renormalised_is_another_body(site: Site, tmp_path: Path) -> None:
    """NFC and NFD spell the same text in different bytes: swapping one for the other (say, to
    make a refund id match another's) changes what was signed."""
    refund(site, unicodedata.normalize("NFC", "rf_é"))
    refunds(site, 1)
    payload = column(site, 1, "payload")
    set_column(site, 1, "payload", unicodedata.normalize("NFD", payload))

    _, err, error = verify_command("--site", site.pk)
    assert error is not None and "FAILED at seq 1: hash does not match the payload" in err
    problems = standalone(export(site, tmp_path / "e.jsonl"))
    assert problems[0] == "FAILED at seq 1: hash does not match the payload", problems


def resign_first_record(site: Site, text: str) -> None:
    """Record 1 (of a one-record log) replaced by ``text``, hashed and signed with Sill's own
    key, its tree rebuilt: what the verifiers would accept if Sill itself had written it."""
    digest = chain.record_hash(chain.GENESIS_HASH, text.encode())
    set_column(site, 1, "hash", digest)
    set_column(site, 1, "payload", text)
    set_column(site, 1, "signature", chain.sign_hash(digest, anchor()[1]))
    AuditChainHead.objects.filter(site=site).update(last_hash=digest, tree_frontier="")
    AuditTreeNode.objects.filter(site=site).delete()
    importlib.import_module("audit.migrations.0006_merkle_tree").build_trees(apps, None)


NUMBER_SPELLINGS = ["8.9e3", "8900.0", "08900", "8900 ", "-0", "89e2"]


@pytest.mark.parametrize("spelling", NUMBER_SPELLINGS)
def test_a_number_spelt_otherwise_is_refused_by_both_even_when_signed(
    site: Site, tmp_path: Path, spelling: str
) -> None:
    """What the verifiers accept if Sill's own key signed it: only the canonical spelling.
    (Sill never writes another; this pins both verifiers to the same answer.)"""
    refunds(site, 1)
    payload = column(site, 1, "payload")
    assert '"amount_minor":8900' in payload
    text = payload.replace('"amount_minor":8900', f'"amount_minor":{spelling}')
    if spelling == "-0":
        text = payload.replace('"amount_minor":8900', '"amount_minor":-0')
    resign_first_record(site, text)

    result = chain_verification(site)
    assert not result.ok and result.first_bad_seq == 1
    assert "canonical" in result.problem, result.problem
    problems = standalone(export(site, tmp_path / "e.jsonl"))
    assert problems[0].startswith("FAILED at seq 1: payload is not"), problems
    assert "canonical" in problems[0]


def test_an_integer_beyond_what_jcs_writes_exactly_is_refused_by_both(
    site: Site, tmp_path: Path
) -> None:
    """RFC 8785 writes numbers as IEEE doubles: 2**53 + 1 has no exact spelling, and a
    verifier in JavaScript would read another amount than Python's do. Sill refuses to write
    one; a record that holds one (signed by its key) is refused by both verifiers too."""
    refunds(site, 1)
    payload = column(site, 1, "payload")
    text = payload.replace('"amount_minor":8900', f'"amount_minor":{2**53 + 1}')
    resign_first_record(site, text)

    result = chain_verification(site)
    assert not result.ok and "2**53" in result.problem, result.problem
    problems = standalone(export(site, tmp_path / "e.jsonl"))
    assert problems[0].startswith("FAILED at seq 1: payload is not canonical JSON"), problems
    assert "2**53" in problems[0]


def test_a_recorded_at_in_another_format_is_refused_by_both(site: Site, tmp_path: Path) -> None:
    """The standalone verifier read recorded_at with fromisoformat (any offset, microseconds);
    the app only as Sill writes it. Signed by Sill's key, both must give the same answer."""
    refunds(site, 1)
    payload = json.loads(column(site, 1, "payload"))
    stamp: str = payload["recorded_at"]
    payload["recorded_at"] = stamp[:-1] + "000+00:00"
    resign_first_record(site, chain.canonical(payload).decode())

    result = chain_verification(site)
    assert not result.ok and result.first_bad_seq == 1 and "recorded_at" in result.problem
    problems = standalone(export(site, tmp_path / "e.jsonl"))
    assert problems and problems[0].startswith("FAILED at seq 1: recorded_at"), problems
