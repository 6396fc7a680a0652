"""What the standalone verifier prints is about the bytes it verified, and stays readable
whatever the file claims."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path
from typing import Any

import pytest

from audit import bundles, checkpoints
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export
from tests.audit.test_wrong_input import standalone

pytestmark = pytest.mark.django_db


def swapped_after_first_read(
    monkeypatch: pytest.MonkeyPatch, path: Path, first: bytes, then: bytes
) -> None:
    """``path`` holds ``first`` and is replaced by a file holding ``then`` (atomically, as
    another process would) the moment anything opens it a second time."""
    path.write_bytes(first)
    replacement = path.with_name(path.name + ".next")
    replacement.write_bytes(then)
    real_open = builtins.open
    opened = []

    def open_watched(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(path):
            opened.append(file)
            if len(opened) == 2:
                os.replace(replacement, path)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_watched)


def test_the_ok_line_names_the_log_it_verified_when_the_file_is_swapped_after(
    site: Site, other_site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "OK: 2 records of log …/<other site>": the file was opened again to name the log.
    build_chain(site, 2)
    build_chain(other_site, 3)
    mine = export(site, tmp_path / "mine.jsonl").read_bytes()
    theirs = export(other_site, tmp_path / "theirs.jsonl").read_bytes()
    path = tmp_path / "swapped.jsonl"
    swapped_after_first_read(monkeypatch, path, mine, theirs)
    code, out, err = standalone(path)
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"OK: 2 records of log {checkpoints.origin_for(site.pk)}, matching their signed checkpoint"
    )


def test_the_ok_line_names_the_refund_it_verified_when_the_bundle_is_swapped_after(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "… about refund rf_2 …": the bundle was read again to verify it and to report.
    build_chain(site, 3)
    first = json.dumps(bundles.refund_bundle(site=site, refund_id="rf_1")).encode()
    second = json.dumps(bundles.refund_bundle(site=site, refund_id="rf_2")).encode()
    path = tmp_path / "swapped.json"
    swapped_after_first_read(monkeypatch, path, first, second)
    code, out, err = standalone(path)
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        f"OK: bundle of 1 records about refund rf_1 of log {checkpoints.origin_for(site.pk)}"
    ), out


HUGE = 10**400 + 7


def test_a_huge_claimed_seq_is_cut_in_failed_lines(site: Site, tmp_path: Path) -> None:
    # Was each FAILED line naming it in full: "FAILED at seq 1000…0007: expected seq 2, found
    # 1000…0007: seqs 2..1000…0006 missing", 1,200 digits in one line.
    build_chain(site, 3)
    lines = export(site, tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])
    lines[2] = json.dumps({**record, "seq": HUGE})
    path = tmp_path / "huge.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bundle = bundles.refund_bundle(site=site, refund_id="rf_2")
    bundle["records"][0]["seq"] = HUGE
    bundle_path = tmp_path / "huge.json"
    bundle_path.write_text(json.dumps(bundle), encoding="utf-8")

    for file in (path, bundle_path):
        code, out, err = standalone(file)
        assert code == 1 and out == "", err
        assert "FAILED at seq 10000000…00007 (401 digits)" in err, err
        assert all(len(line) < 300 for line in err.splitlines()), err
