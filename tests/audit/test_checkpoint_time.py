"""A checkpoint carries the time its key signed it (a c2sp.org/tlog-cosignature v1 line by the
same key), so whoever keeps one knows how fresh it is; checkpoints signed before that, with no
such line, still verify."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from audit import checkpoints, keys, note
from audit.models import AuditCheckpoint
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export
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
