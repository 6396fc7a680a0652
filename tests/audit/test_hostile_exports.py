"""Hostile exports fed to the standalone verifier: each is refused, naming the line or record
(or the header) it is about; never a traceback, never OK.

The database side of the same attacks (a payload byte, nesting past the recursion limit, a gap,
swapped records, a record of another site) is in test_tamper.py and test_auditor_attacks.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from audit import bundles, keys, verify_export
from audit.chain import b64url_encode
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export
from tests.audit.test_wrong_input import standalone

pytestmark = pytest.mark.django_db

Lines = list[str]


def edit(line: int, **fields: object) -> Callable[[Lines, Lines], Lines]:
    def change(lines: Lines, _: Lines) -> Lines:
        record = json.loads(lines[line])
        record.update(fields)
        return [*lines[:line], json.dumps(record), *lines[line + 1 :]]

    return change


def text(line: int, old: str, new: str) -> Callable[[Lines, Lines], Lines]:
    def change(lines: Lines, _: Lines) -> Lines:
        assert old in lines[line], lines[line]
        return [*lines[:line], lines[line].replace(old, new, 1), *lines[line + 1 :]]

    return change


def spliced(lines: Lines, theirs: Lines) -> Lines:
    """Record 3 replaced by the other site's record 2, renumbered."""
    return [*lines[:3], json.dumps({**json.loads(theirs[2]), "seq": 3}), *lines[4:]]


# Lines: 0 the header, 1..4 records seq 1..4, 5 the checkpoint line.
HOSTILE: dict[str, tuple[Callable[[Lines, Lines], Lines], str]] = {
    # A second "seq"/"payload" a first-wins reader (another language's JSON) reads instead.
    "duplicate seq key": (
        text(2, '{"type": "record", ', '{"type": "record", "seq": 9, '),
        "line 3",
    ),
    "duplicate payload key": (
        text(2, '{"type": "record", ', '{"type": "record", "payload": "{}", '),
        "line 3",
    ),
    "duplicate header key": (
        text(0, '{"type": "header", ', '{"type": "header", "origin": "x", '),
        "line 1",
    ),
    "NaN in a record line": (
        text(1, '{"type": "record", ', '{"type": "record", "x": NaN, '),
        "line 2",
    ),
    "Infinity in the header": (
        text(0, '{"type": "header", ', '{"type": "header", "x": -Infinity, '),
        "line 1",
    ),
    "a float seq": (text(1, '"seq": 1,', '"seq": 1.0,'), "line 2"),
    "a huge number": (
        text(1, '{"type": "record", ', '{"type": "record", "x": ' + "9" * 5000 + ", "),
        "line 2",
    ),
    "nested past the recursion limit": (
        text(
            1,
            '{"type": "record", ',
            '{"type": "record", "x": ' + "[" * 100_000 + "]" * 100_000 + ", ",
        ),
        "line 2",
    ),
    "records out of order": (lambda lines, _: [lines[0], lines[2], lines[1], *lines[3:]], "seq 2"),
    "a record repeated": (lambda lines, _: [*lines[:3], lines[2], *lines[3:]], "seq 2"),
    "a gap": (lambda lines, _: [*lines[:2], *lines[3:]], "seq 3"),
    "a record of another site spliced in": (spliced, "seq 3"),
    "a signature too short": (edit(2, signature="A" * 85), "seq 2"),
    "a signature too long": (edit(2, signature="A" * 87), "seq 2"),
    "a signature that is a number": (edit(2, signature=7), "seq 2"),
    "public_keys not an object": (edit(0, public_keys=["x"]), "the header"),
    "a public key not a string": (edit(0, public_keys={"sill-x": 7}), "the header"),
    "key_windows not an object": (edit(0, key_windows=[1]), "the header"),
    "a second checkpoint line": (lambda lines, _: [*lines[:-1], lines[-1], lines[-1]], "line 7"),
}


@pytest.mark.parametrize("pinned", [False, True], ids=["unpinned", "pinned"])
@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_export_is_refused_naming_where(
    name: str, pinned: bool, site: Site, other_site: Site, tmp_path: Path
) -> None:
    build_chain(site, 4)
    build_chain(other_site, 2)
    lines = export(site, tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()
    theirs = export(other_site, tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()
    hostile, where = HOSTILE[name]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(hostile(lines, theirs)) + "\n", encoding="utf-8")
    key_id, key = keys.signing_key()
    args = ["--public-key", f"{key_id}={b64url_encode(bytes(key.verify_key))}"] if pinned else []

    code, out, err = standalone(path, *args)
    assert code == 1 and out == "", (code, out, err)
    assert err.startswith(f"FAILED at {where}"), err
    assert all(line.startswith("FAILED at ") for line in err.splitlines()), err


def test_a_byte_that_is_not_utf8_fails_at_its_line(site: Site, tmp_path: Path) -> None:
    # Was "FAILED: cannot read a file: 'utf-8' codec can't decode byte 0xff …": no line named.
    build_chain(site, 3)
    path = export(site, tmp_path / "e.jsonl")
    data = path.read_bytes().split(b"\n")
    data[2] = data[2].replace(b"settlement", b"settl\xffment", 1)
    path.write_bytes(b"\n".join(data))
    code, out, err = standalone(path)
    assert code == 1 and out == ""
    assert err.splitlines()[0] == "FAILED at line 3: not UTF-8 text", err


def test_strict_parsing_keeps_an_export_verifying(site: Site, tmp_path: Path) -> None:
    build_chain(site, 3)
    assert verify_export.verify_path(str(export(site, tmp_path / "e.jsonl")), None, None)[2] == []


def test_a_bundle_with_a_key_twice_is_refused(site: Site, tmp_path: Path) -> None:
    build_chain(site, 2)
    bundle = json.dumps(bundles.refund_bundle(site=site, refund_id="rf_1"))
    path = tmp_path / "bundle.json"
    path.write_text(bundle.replace('{"format": ', '{"refund_id": "rf_2", "format": ', 1))
    code, out, err = standalone(path)
    assert code == 1 and out == ""
    assert err.startswith("FAILED at the bundle: not JSON as Sill writes it (duplicate key"), err
