"""An auditor handed the wrong file is told so, apart from a log that fails verification.

`audit verify` and the standalone verifier exit 1 with ``FAILED …`` only when the evidence
was checked and does not hold; a file that is not what its argument asks for (not a
checkpoint, another log's checkpoint, cut short, binary, not an export) is refused before
anything is verified, with exit 2 and a message naming the file and what it is not.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit import bundles, checkpoints, verify_export
from audit.selectors import key_listing
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export, run_standalone

pytestmark = pytest.mark.django_db


def wrong_checkpoints(site: Site, other_site: Site, tmp_path: Path) -> dict[str, Path]:
    """Files an auditor may pass as ``--checkpoint`` by mistake, by what is wrong with them."""
    build_chain(site, 3)
    build_chain(other_site, 2)
    mine = checkpoints.write_checkpoint(site=site)
    theirs = checkpoints.write_checkpoint(site=other_site)
    assert mine is not None and theirs is not None
    files: dict[str, str | bytes] = {
        "another site's checkpoint": theirs.note,
        "cut short": mine.note[: len(mine.note) // 2],
        "cut short before its signature": mine.note.split("\n\n")[0] + "\n",
        "JSON": '{"keys": [{"key_id": "sill-0123"}]}\n',
        "cut-short JSON": '{"keys": [{"key_id": ',
        "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
        "empty": "",
    }
    paths = {}
    for i, (name, content) in enumerate(files.items()):
        path = tmp_path / f"wrong-{i}"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths[name] = path
    paths["a folder"] = tmp_path
    paths["no such file"] = tmp_path / "kept.txt"
    return paths


WRONG = [
    "another site's checkpoint",
    "cut short",
    "cut short before its signature",
    "JSON",
    "cut-short JSON",
    "binary",
    "empty",
    "a folder",
    "no such file",
]


def verify(*args: str) -> tuple[str, str, CommandError | None]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("audit", "verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), exc
    return out.getvalue(), err.getvalue(), None


@pytest.mark.parametrize("wrong", WRONG)
def test_it_tells_the_auditor_their_checkpoint_file_is_wrong(
    wrong: str, site: Site, other_site: Site, tmp_path: Path
) -> None:
    # Was "site S: FAILED: the checkpoint does not verify: …", exit 1: a tampered log.
    path = wrong_checkpoints(site, other_site, tmp_path)[wrong]
    out, err, error = verify("--site", site.pk, "--checkpoint", str(path))
    assert error is not None and error.returncode == 2, (out, err, error)
    assert "FAILED" not in err + str(error) and out == ""
    assert str(error).startswith(f"{path}: ") and "nothing was verified" in str(error)
    if wrong == "another site's checkpoint":
        assert f"of log {checkpoints.origin_for(other_site.pk)}, not of site {site.pk}'s" in str(
            error
        )


def test_a_genuine_checkpoint_that_the_log_does_not_reach_still_fails_verification(
    site: Site, tmp_path: Path
) -> None:
    """What stays exit 1: the file is a checkpoint of this site's log, the log fails it."""
    build_chain(site, 3)
    kept = checkpoints.write_checkpoint(site=site)
    assert kept is not None
    path = tmp_path / "kept.txt"
    path.write_text(kept.note.replace("\n3\n", "\n4\n", 1), encoding="utf-8")  # signature broken
    _, err, error = verify("--site", site.pk, "--checkpoint", str(path))
    assert error is not None and error.returncode == 1
    assert f"site {site.pk}: FAILED: the checkpoint does not verify" in err


@pytest.mark.parametrize(
    "args",
    [("--site", "01NOSUCHSITE000000000000000"), ("--checkpoint", "kept.txt")],
    ids=["unknown site", "checkpoint without a site"],
)
def test_a_wrong_site_or_missing_site_is_an_input_error(args: tuple[str, ...], site: Site) -> None:
    build_chain(site, 1)
    _, _, error = verify(*args)
    assert error is not None and error.returncode == 2, error


def standalone(*args: object) -> tuple[int, str, str]:
    """The standalone verifier's exit code, standard output and standard error, in-process
    (run_standalone runs a copy isolated from Sill where that matters)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = verify_export.main([str(a) for a in args])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def assert_wrong_input(result: tuple[int, str, str], argument: str) -> None:
    code, out, err = result
    assert code == 2 and out == "", result
    assert err.startswith(f"WRONG INPUT: {argument}: ") and "FAILED" not in err, err
    assert err.strip().endswith("nothing was verified"), err


@pytest.mark.parametrize("wrong", WRONG)
def test_the_standalone_verifier_tells_the_auditor_their_checkpoint_file_is_wrong(
    wrong: str, site: Site, other_site: Site, tmp_path: Path
) -> None:
    # Was "FAILED at the trusted checkpoint: not a signed note" (or "… is not signed by a known
    # key", for another site's), or "FAILED: cannot read a file", exit 1.
    path = wrong_checkpoints(site, other_site, tmp_path)[wrong]
    exported = export(site, tmp_path / "e.jsonl")
    assert_wrong_input(standalone(exported, "--checkpoint", path), f"--checkpoint {path}")
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(bundles.refund_bundle(site=site, refund_id="rf_1")))
    assert_wrong_input(standalone(bundle, "--checkpoint", path), f"--checkpoint {path}")


@pytest.mark.parametrize(
    "wrong", ["a checkpoint", "keys file", "JSON", "binary", "empty", "a folder", "no such file"]
)
def test_the_standalone_verifier_tells_the_auditor_the_file_is_no_export_or_bundle(
    wrong: str, site: Site, tmp_path: Path
) -> None:
    # Was "FAILED at line 1: no header" or "FAILED: cannot read a file", exit 1.
    build_chain(site, 2)
    signed = checkpoints.write_checkpoint(site=site)
    assert signed is not None
    contents: dict[str, str | bytes] = {
        "a checkpoint": signed.note,
        "keys file": json.dumps(key_listing()),
        "JSON": '{"records": []}',
        "binary": b"\x1f\x8b\x08\x00\xff\xfe",
        "empty": "",
    }
    path = {"a folder": tmp_path, "no such file": tmp_path / "audit.jsonl"}.get(wrong)
    if path is None:
        path = tmp_path / "audit.jsonl"
        content = contents[wrong]
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = standalone(path)
    assert_wrong_input((code, out, err), str(path))
    if wrong == "a checkpoint":
        assert "pass it with --checkpoint" in err


@pytest.mark.parametrize("text", ["not json", "[]", '{"keys": {}}', '{"keys": []}', b"\xff"])
def test_a_file_that_is_no_keys_file_is_wrong_input(
    site: Site, tmp_path: Path, text: str | bytes
) -> None:
    build_chain(site, 1)
    keys_file = tmp_path / "keys.json"
    keys_file.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = standalone(export(site, tmp_path / "e.jsonl"), "--keys", keys_file)
    assert_wrong_input(result, f"--keys {keys_file}")


def test_an_export_of_another_site_or_no_export_completing_a_bundle_is_wrong_input(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    build_chain(site, 2)
    build_chain(other_site, 2)
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(bundles.refund_bundle(site=site, refund_id="rf_1")))
    theirs = export(other_site, tmp_path / "theirs.jsonl")
    result = standalone(bundle, "--export", theirs)
    assert_wrong_input(result, f"--export {theirs}")
    assert f"an export of site {other_site.pk}" in result[2]
    assert_wrong_input(standalone(bundle, "--export", bundle), f"--export {bundle}")
    (tmp_path / "proof.json").write_text("{not json")
    result = standalone(bundle, "--checkpoint", bundle, "--consistency", tmp_path / "proof.json")
    assert_wrong_input(result, f"--consistency {tmp_path / 'proof.json'}")


def test_the_standalone_verifier_exits_2_on_wrong_input_run_alone(
    site: Site, other_site: Site, tmp_path: Path
) -> None:
    """As an auditor runs it, without Sill: the exit code itself."""
    path = wrong_checkpoints(site, other_site, tmp_path)["another site's checkpoint"]
    result = run_standalone(
        tmp_path, str(export(site, tmp_path / "e.jsonl")), "--checkpoint", str(path)
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"WRONG INPUT: --checkpoint {path}: a checkpoint of log ")
