"""A checkpoint carries the time its key signed it (a c2sp.org/tlog-cosignature v1 line by the
same key), so whoever keeps one knows how fresh it is; checkpoints signed before that, with no
such line, still verify."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import time_machine
from django.core.management import call_command

from audit import bundles, checkpoints, keys, note, verify_export
from audit.models import AuditCheckpoint, AuditRecord
from audit.selectors import chain_verification
from sill.accounts.models import Site
from tests.audit.test_key_order import rotate
from tests.audit.test_tamper import build_chain, export, verify_command
from tests.audit.test_wrong_input import standalone

pytestmark = pytest.mark.django_db


def timed_line(signed: str) -> tuple[str, int, bytes]:
    """(key name, time, signature) of the note's cosignature/v1 line, read as the spec says."""
    _, key = keys.signing_key()
    public = bytes(key.verify_key)
    for line in signed.split("\n\n")[1].splitlines():
        name, encoded = line.removeprefix("\u2014 ").split(" ")
        blob = base64.b64decode(encoded)
        if blob[:4] == hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4]:
            return name, int.from_bytes(blob[4:12], "big"), blob[12:]
    raise AssertionError("no cosignature/v1 line")


def test_a_checkpoint_is_signed_with_its_time(site: Site) -> None:
    before = int(datetime.now(UTC).timestamp())
    build_chain(site, 2)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    name, at, signature = timed_line(signed.note)
    assert name == checkpoints.origin_for(site.pk)
    assert before <= at <= int(datetime.now(UTC).timestamp())
    text = signed.note.split("\n\n")[0] + "\n"
    keys.signing_key()[1].verify_key.verify(
        f"cosignature/v1\ntime {at}\n".encode() + text.encode(), signature
    )
    opened = checkpoints.open_checkpoint(signed.note, site_id=site.pk)
    assert opened.signed_at == datetime.fromtimestamp(at, UTC)


def untimed(site: Site) -> str:
    """A checkpoint as Sill signed them before they carried a time."""
    signed = checkpoints.latest_checkpoint(site_id=site.pk)
    assert signed is not None
    text = signed.note.split("\n\n")[0] + "\n"
    return note.sign(text, name=checkpoints.origin_for(site.pk), signing_key=keys.signing_key()[1])


def test_both_verifiers_say_when_a_kept_checkpoint_was_signed_and_an_older_one_still_verifies(
    site: Site, tmp_path: Path
) -> None:
    build_chain(site, 2)
    timed = checkpoints.write_checkpoint(site=site)
    assert timed is not None
    _, at, _ = timed_line(timed.note)
    when = f"{datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M:%S} UTC"
    path = export(site, tmp_path / "e.jsonl")
    for kept, said in (
        (timed.note, f"was signed at {when}"),
        (untimed(site), "carries no signed time"),
    ):
        (tmp_path / "kept.txt").write_text(kept, encoding="utf-8")
        out = io.StringIO()
        call_command(
            "audit",
            "verify",
            "--site",
            site.pk,
            "--checkpoint",
            str(tmp_path / "kept.txt"),
            stdout=out,
        )
        assert out.getvalue().splitlines() == [
            f"site {site.pk}: 2 records OK",
            f"site {site.pk}: the checkpoint you gave (2 records) {said}"
            + (" (Sill signed it before it timed its checkpoints)" if kept != timed.note else ""),
        ]
        code, stdout, err = standalone(path, "--checkpoint", tmp_path / "kept.txt")
        assert code == 0, err
        assert stdout.splitlines()[1:] == [
            f"Its checkpoint was signed at {when}.",
            f"The checkpoint you kept (--checkpoint) {said}"
            + (" (Sill signed it before it timed its checkpoints)." if kept != timed.note else "."),
        ]


def test_a_changed_time_is_refused_by_both(site: Site, tmp_path: Path) -> None:
    build_chain(site, 2)
    timed = checkpoints.write_checkpoint(site=site)
    assert timed is not None
    head, block = timed.note.split("\n\n")
    lines = block.splitlines()
    blob = bytearray(base64.b64decode(lines[1].split(" ")[2]))
    blob[11] ^= 1  # a second later
    lines[1] = " ".join([*lines[1].split(" ")[:2], base64.b64encode(bytes(blob)).decode()])
    moved = head + "\n\n" + "\n".join(lines) + "\n"
    AuditCheckpoint.objects.filter(pk=timed.pk).update(note=moved)

    with pytest.raises(note.NoteError, match="timed signature"):
        checkpoints.open_checkpoint(moved, site_id=site.pk)
    path = export(site, tmp_path / "e.jsonl")
    exported = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(exported[-1])["note"] == moved
    code, _, err = standalone(path)
    assert code == 1
    assert err.startswith(
        "FAILED at the export's checkpoint: the checkpoint's timed signature does not verify"
    ), err


# -- a checkpoint's time is its key's word: inside the key's window, after what it counts ----


def hour_ago_then(site: Site, later: int) -> None:
    """One record timed an hour ago, then ``later`` records now."""
    with time_machine.travel(datetime.now(UTC) - timedelta(hours=1)):
        build_chain(site, 1)
    build_chain(site, later)


def signed_by(
    site: Site, signing_key: nacl.signing.SigningKey, *, at: datetime, size: int | None = None
) -> str:
    """A checkpoint of the site's first ``size`` records (all by default), as whoever holds
    ``signing_key`` can sign one, timed ``at``."""
    payloads = list(
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("payload", flat=True)
    )[:size]
    root = verify_export.merkle_root([verify_export.leaf_of(p) for p in payloads])
    text = note.Checkpoint(origin=checkpoints.origin_for(site.pk), size=len(payloads), root=root)
    return note.sign(
        text.text(),
        name=checkpoints.origin_for(site.pk),
        signing_key=signing_key,
        timestamp=int(at.timestamp()),
    )


def first_recorded_at(site: Site) -> datetime:
    return AuditRecord.objects.get(site=site, seq=1).created_at


def utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def sill_said(problem: str) -> str:
    """``audit verify``'s words for a window problem the standalone verifier words so."""
    return problem.replace("by ", "by key ", 1).replace("its window", "its validity window")


def by_a_retired_key_after_its_window(site: Site) -> tuple[str, str, str]:
    """The configured key, retired by a rotation an hour ago, signs the whole log as of now."""
    configured_id, configured = keys.signing_key()
    with time_machine.travel(datetime.now(UTC) - timedelta(hours=1)):
        build_chain(site, 1)
        rotate()
        build_chain(site, 1)
    build_chain(site, 1)
    now = datetime.now(UTC)
    problem = f"signed by {configured_id} at {utc(now)}, outside its window"
    return signed_by(site, configured, at=now), problem, sill_said(problem)


def by_a_rotated_key_before_its_window(site: Site) -> tuple[str, str, str]:
    """The rotated key signs the log's first record, timed before it was valid."""
    hour_ago_then(site, 0)
    successor = rotate()
    build_chain(site, 1)
    _, rotated = keys.signing_key()
    at = first_recorded_at(site) + timedelta(minutes=1)
    problem = f"signed by {successor.key_id} at {utc(at)}, outside its window"
    return signed_by(site, rotated, at=at, size=1), problem, sill_said(problem)


def before_the_records_it_counts(site: Site) -> tuple[str, str, str]:
    """The key in force signs all three records, timed after the first and before the rest."""
    hour_ago_then(site, 2)
    _, key = keys.signing_key()
    at = first_recorded_at(site) + timedelta(minutes=1)
    third = AuditRecord.objects.get(site=site, seq=3)
    stamp = json.loads(third.payload)["recorded_at"]
    return (
        signed_by(site, key, at=at),
        f"signed at {utc(at)}, before seq 3's recorded_at {stamp}, which it counts",
        f"was signed at {utc(at)}, before seq 3's recorded_at {stamp}, which it counts",
    )


FORGED_TIMES = {
    "by a retired key, after its window": by_a_retired_key_after_its_window,
    "by a rotated key, before its window": by_a_rotated_key_before_its_window,
    "before the records it counts": before_the_records_it_counts,
}


@pytest.mark.parametrize("case", FORGED_TIMES)
def test_both_verifiers_refuse_a_checkpoint_timed_where_its_key_could_not_have_signed_it(
    case: str, site: Site, settings: Any, tmp_path: Path
) -> None:
    # Was OK from both: the time was read and printed, never checked.
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0
    forged, standalone_problem, sill_problem = FORGED_TIMES[case](site)
    kept = tmp_path / "kept.txt"
    kept.write_text(forged, encoding="utf-8")

    _, err, error = verify_command("--site", site.pk, "--checkpoint", str(kept))
    assert error is not None and error.returncode == 1, err
    assert sill_problem in err, err

    path = export(site, tmp_path / "e.jsonl")
    code, _, err = standalone(path, "--checkpoint", kept)
    assert code == 1 and f"FAILED at the trusted checkpoint: {standalone_problem}" in err, err
    lines = path.read_text(encoding="utf-8").splitlines()
    size = int(forged.split("\n")[1])
    if size == len(lines) - 2:  # of the whole log: it can stand as the export's checkpoint
        lines[-1] = json.dumps({"type": "checkpoint", "note": forged})
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        code, _, err = standalone(path)
        assert code == 1 and f"FAILED at the export's checkpoint: {standalone_problem}" in err
        bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
        records = bundle["records"]
        bundle_path = tmp_path / "b.json"
        bundle_path.write_text(json.dumps({**bundle, "checkpoint": forged}), encoding="utf-8")
        code, _, err = standalone(bundle_path)
        assert code == 1 and records, err
        if case != "before the records it counts":  # the bundle holds only seq 3's refund's
            assert f"FAILED at the bundle's checkpoint: {standalone_problem}" in err, err


def test_a_checkpoint_after_a_record_timed_by_a_host_ahead_is_timed_after_it(
    site: Site, tmp_path: Path
) -> None:
    """A host whose clock is ahead times the log's last record; a host in time signs the next
    checkpoint, and times it no earlier than that record (as records are), so it verifies."""
    build_chain(site, 1)
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=5)):
        build_chain(site, 1)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    # Was "a signed checkpoint was signed at <now>, before seq 2's recorded_at <5 s later>".
    result = chain_verification(site)
    assert result.ok, result
    code, _, err = standalone(export(site, tmp_path / "e.jsonl"))
    assert code == 0, err
    opened = checkpoints.open_checkpoint(signed.note, site_id=site.pk)
    last = AuditRecord.objects.get(site=site, seq=2).created_at
    assert opened.signed_at == last.replace(microsecond=0)
