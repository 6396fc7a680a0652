"""The auditor's own copy of Sill's keys: `/.well-known/sill-audit-keys.json`, fetched by them and
given to the standalone verifier with ``--keys``.

An export's header lists the keys and their windows, and a retired key's window ends where the
next listed key begins. Someone holding a retired key (a leaked backup and the SECRET_KEY of its
day) who drops its successor from the header, and re-signs what came after with the retired key,
leaves a file in which nothing says the key was retired: only a checkpoint the auditor kept
caught it. With ``--keys`` the keys and windows are the ones Sill publishes (each rotated key
endorsed by the configured key, as in a header), so the successor cannot be dropped.

The keys file is always the real view's answer (Django test client), never a copy written here.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from django.test import Client
from django.utils import timezone

from audit import bundles, chain, keys, verify_export
from audit.checkpoints import origin_for
from audit.models import AuditKey, AuditRecord
from sill.accounts.models import Site
from tests.audit.test_auditor_attacks import (
    lines_of,
    refund,
    resign_record,
    signed_checkpoint,
    write_lines,
)
from tests.audit.test_tamper import export, run_standalone

pytestmark = pytest.mark.django_db


@pytest.fixture
def switch_now(settings: Any) -> None:
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0


def rotate() -> keys.KeyWindow:
    window = keys.rotate_key()
    assert window.valid_from is not None
    while timezone.now() < window.valid_from:
        time.sleep(0.001)
    return window


def fetch_keys(path: Path) -> Path:
    """What the auditor saves: Sill's answer at the well-known address, byte for byte."""
    answer = Client().get("/.well-known/sill-audit-keys.json")
    assert answer.status_code == 200
    path.write_bytes(answer.content)
    return path


def pin() -> str:
    key_id, key = keys.configured_key()
    return f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}"


def pinned() -> dict[str, Any]:
    key_id, key = keys.configured_key()
    return {key_id: key.verify_key}


def problems_of(
    path: Path, *, keys_file: Path | None = None, trusted: dict[str, Any] | None = None
) -> list[str]:
    published = json.loads(keys_file.read_text()) if keys_file is not None else None
    _, _, problems = verify_export.verify_path(str(path), trusted, None, published=published)
    return problems


def two_rotations(site: Site) -> tuple[keys.KeyWindow, keys.KeyWindow]:
    """rf_1 by the configured key, rf_2 by the first rotated key, rf_3 and rf_4 by the second."""
    refund(site, "rf_1")
    first = rotate()
    refund(site, "rf_2")
    second = rotate()
    refund(site, "rf_3")
    refund(site, "rf_4")
    signers = list(AuditRecord.objects.filter(site=site).values_list("key_id", flat=True))
    assert signers == [keys.configured_key()[0], first.key_id, second.key_id, second.key_id]
    return first, second


def test_a_genuine_export_with_rotated_keys_passes_with_the_keys_file(
    site: Site, switch_now: None, tmp_path: Path
) -> None:
    two_rotations(site)
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    path = export(site, tmp_path / "e.jsonl")
    ok = f"OK: 4 records of log {origin_for(site.pk)}, matching their signed checkpoint"

    for pinning in ([], ["--public-key", pin()]):
        result = run_standalone(tmp_path, str(path), "--keys", str(keys_file), *pinning)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0] == ok
        # Unpinned, the OK is the keys file's word: the auditor is told so, beside the OK.
        if pinning:
            assert "NOTE" not in result.stderr
        else:
            assert "NOTE: no key was pinned" in result.stderr
            assert "the keys file as you gave it" in result.stderr
    published = json.loads(keys_file.read_text())
    bundle = bundles.refund_bundle(site=site, refund_id="rf_3")
    assert verify_export.verify_bundle(bundle, None, None, published=published) == (1, [])
    assert verify_export.verify_bundle(bundle, pinned(), None, published=published) == (1, [])


def drop_successor(path: Path, retired: keys.KeyWindow, successor: keys.KeyWindow) -> None:
    """The forgery: the successor gone from the header, the retired key's window left open,
    the successor's records rewritten (ten times the refund) and re-signed with the retired key,
    and the export's checkpoint signed anew by it."""
    signer = keys._unseal(AuditKey.objects.get(key_id=retired.key_id))
    lines = lines_of(path)
    header = json.loads(lines[0])
    del header["public_keys"][successor.key_id]
    del header["key_windows"][successor.key_id]
    header["key_windows"][retired.key_id]["valid_until"] = None
    records = [json.loads(line) for line in lines[1:5]]
    prev = records[1]["hash"]
    for i in (2, 3):
        payload = json.loads(records[i]["payload"])
        payload["body"]["amount_minor"] = 89000
        records[i] = resign_record(records[i], payload, prev, signer)
        prev = records[i]["hash"]
    checkpoint = signed_checkpoint(header["origin"], [r["payload"] for r in records], signer)
    write_lines(
        path,
        [
            json.dumps(header),
            *(json.dumps(r) for r in records),
            json.dumps({"type": "checkpoint", "note": checkpoint}),
        ],
    )


def test_a_retired_key_signing_on_with_its_successor_dropped_from_the_header_fails_with_keys(
    site: Site, switch_now: None, tmp_path: Path
) -> None:
    first, second = two_rotations(site)
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    path = export(site, tmp_path / "e.jsonl")
    drop_successor(path, retired=first, successor=second)

    # The limit of a file on its own, pinned or not: nothing in it says the key was retired.
    assert problems_of(path) == []
    assert problems_of(path, trusted=pinned()) == []

    for trusted in (None, pinned()):
        problems = problems_of(path, keys_file=keys_file, trusted=trusted)
        assert problems[0].startswith(f"FAILED at seq 3: signed by {first.key_id} at "), problems
        assert problems[0].endswith("outside its window")
        assert problems[1].startswith(f"FAILED at seq 4: signed by {first.key_id} at ")
        assert len(problems) == 2, problems
    result = run_standalone(tmp_path, str(path), "--keys", str(keys_file), "--public-key", pin())
    assert result.returncode == 1
    assert result.stderr.startswith(f"FAILED at seq 3: signed by {first.key_id} at ")


def test_a_key_the_export_lists_and_the_keys_file_does_not_is_unknown(
    site: Site, switch_now: None, tmp_path: Path
) -> None:
    """A key in the header only (an attacker's, or one rotated after the auditor fetched the
    keys file): the records it signed fail, and the header says why."""
    refund(site, "rf_1")
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    rotated = rotate()
    refund(site, "rf_2")
    path = export(site, tmp_path / "e.jsonl")
    assert problems_of(path, trusted=pinned()) == []

    problems = problems_of(path, keys_file=keys_file)
    assert problems[0] == (
        f"FAILED at the header: key {rotated.key_id} is not in the keys file: the records it "
        "signed are refused (fetch the keys file again if the export is newer)"
    )
    assert f"FAILED at seq 2: unknown key_id {rotated.key_id!r}" in problems


def forge_added(listed: list[dict[str, Any]], attacker: nacl.signing.SigningKey) -> str:
    """An attacker's own key added, with an endorsement they signed themselves."""
    key_id = keys.key_id_for(attacker.verify_key)
    valid_from = timezone.now() - timedelta(days=1)
    statement = keys.endorsement_statement(key_id, bytes(attacker.verify_key), valid_from)
    listed.append(
        {
            "key_id": key_id,
            "algorithm": "Ed25519",
            "public_key": chain.b64url_encode(bytes(attacker.verify_key)),
            "valid_from": valid_from.isoformat(),
            "valid_until": None,
            "endorsement": chain.b64url_encode(attacker.sign(statement).signature),
            "endorsed_by": listed[0]["key_id"],
        }
    )
    return key_id


def forge_unendorsed(listed: list[dict[str, Any]], attacker: nacl.signing.SigningKey) -> str:
    key_id = forge_added(listed, attacker)
    del listed[-1]["endorsement"], listed[-1]["endorsed_by"]
    return key_id


def forge_swapped(listed: list[dict[str, Any]], attacker: nacl.signing.SigningKey) -> str:
    """The rotated key's entry kept (id, window, genuine endorsement), its public key theirs."""
    listed[1]["public_key"] = chain.b64url_encode(bytes(attacker.verify_key))
    return str(listed[1]["key_id"])


FORGERIES = {"endorsed by itself": forge_added, "unendorsed": forge_unendorsed}


@pytest.mark.parametrize("forgery", [*FORGERIES, "public key swapped"])
def test_a_keys_file_with_a_key_the_configured_key_did_not_endorse_is_refused(
    site: Site, switch_now: None, tmp_path: Path, forgery: str
) -> None:
    """Whoever can change what the auditor fetched adds a key of theirs (or swaps the public key
    of a rotated one) and signs records with it: the key is refused, and its records fail."""
    refund(site, "rf_1")
    rotate()
    refund(site, "rf_2")
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    published = json.loads(keys_file.read_text())
    attacker = nacl.signing.SigningKey.generate()
    make = FORGERIES.get(forgery, forge_swapped)
    forged_id = make(published["keys"], attacker)
    keys_file.write_text(json.dumps(published))
    path = export(site, tmp_path / "e.jsonl")
    lines = lines_of(path)
    header = json.loads(lines[0])
    header["public_keys"][forged_id] = chain.b64url_encode(bytes(attacker.verify_key))
    records = [json.loads(line) for line in lines[1:3]]
    records[1] = resign_record(
        records[1], json.loads(records[1]["payload"]), records[0]["hash"], attacker
    )
    records[1]["key_id"] = forged_id
    write_lines(path, [json.dumps(header), *(json.dumps(r) for r in records), lines[3]])

    for trusted in (None, pinned()):
        problems = problems_of(path, keys_file=keys_file, trusted=trusted)
        assert problems[0].startswith(f"FAILED at the keys file: key {forged_id}: its "), problems
        assert "endorsement" in problems[0]
        assert f"FAILED at seq 2: unknown key_id {forged_id!r}" in problems
    result = run_standalone(tmp_path, str(path), "--keys", str(keys_file))
    assert result.returncode == 1
    assert result.stderr.startswith(f"FAILED at the keys file: key {forged_id}: ")


def test_a_pinned_key_the_keys_file_does_not_list_is_a_problem(site: Site, tmp_path: Path) -> None:
    """--public-key pins which key of the file is the root: a keys file from another Sill (or
    one whose configured key was replaced) is not the one the auditor pinned."""
    refund(site, "rf_1")
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    path = export(site, tmp_path / "e.jsonl")
    stranger = nacl.signing.SigningKey.generate()
    stranger_id = keys.key_id_for(stranger.verify_key)

    assert problems_of(path, keys_file=keys_file, trusted=pinned()) == []
    problems = problems_of(path, keys_file=keys_file, trusted={stranger_id: stranger.verify_key})
    assert problems[0] == (
        f"FAILED at the keys file: it does not list the key you pinned, {stranger_id}"
    )


def test_a_windowless_key_added_to_the_keys_file_is_used_only_if_pinned(
    site: Site, tmp_path: Path
) -> None:
    """A key with no window reads as a legacy key: the file's word alone makes it a root, so
    pinning the configured key is what keeps it out."""
    refund(site, "rf_1")
    refund(site, "rf_2")
    keys_file = fetch_keys(tmp_path / "sill-audit-keys.json")
    published = json.loads(keys_file.read_text())
    attacker = nacl.signing.SigningKey.generate()
    forged_id = forge_unendorsed(published["keys"], attacker)
    published["keys"][-1]["valid_from"] = None
    keys_file.write_text(json.dumps(published))
    path = export(site, tmp_path / "e.jsonl")
    lines = lines_of(path)
    records = [json.loads(line) for line in lines[1:3]]
    records[1] = resign_record(
        records[1], json.loads(records[1]["payload"]), records[0]["hash"], attacker
    )
    header = json.loads(lines[0])
    header["public_keys"][forged_id] = chain.b64url_encode(bytes(attacker.verify_key))
    write_lines(path, [json.dumps(header), *(json.dumps(r) for r in records), lines[3]])

    assert problems_of(path, keys_file=keys_file) == []  # the file is trusted as fetched
    problems = problems_of(path, keys_file=keys_file, trusted=pinned())
    assert problems == [f"FAILED at seq 2: unknown key_id {forged_id!r}"]


@pytest.mark.parametrize(
    ("text", "returncode"),
    [
        # No keys file at all: the auditor's mistake (exit 2, tests/audit/test_wrong_input.py).
        ("not json", 2),
        ("[]", 2),
        ('{"keys": {}}', 2),
        # A keys file listing a key that is not one: refused as evidence.
        ('{"keys": [{"key_id": "sill-x"}]}', 1),
    ],
)
def test_a_keys_file_that_is_not_sills_answer_is_refused(
    site: Site, tmp_path: Path, text: str, returncode: int
) -> None:
    refund(site, "rf_1")
    path = export(site, tmp_path / "e.jsonl")
    (tmp_path / "keys.json").write_text(text)
    result = run_standalone(tmp_path, str(path), "--keys", str(tmp_path / "keys.json"))
    assert result.returncode == returncode
    start = "FAILED at the keys file: " if returncode == 1 else "WRONG INPUT: --keys "
    assert result.stderr.startswith(start), result.stderr


def test_the_keys_file_names_the_configured_key_as_every_rotated_keys_endorser(
    switch_now: None,
) -> None:
    """What ``--keys`` relies on: the view's shape (rotated keys' windows are whole
    milliseconds, as their endorsements state them)."""
    rotate()
    listed = Client().get("/.well-known/sill-audit-keys.json").json()["keys"]
    assert listed[0]["key_id"] == keys.configured_key()[0] and "endorsement" not in listed[0]
    assert listed[1]["endorsed_by"] == listed[0]["key_id"]
    assert datetime.fromisoformat(listed[1]["valid_from"]).microsecond % 1000 == 0


def test_an_ok_without_a_pinned_key_says_the_file_vouched_for_its_own_keys(
    site: Site, switch_now: None, tmp_path: Path
) -> None:
    two_rotations(site)
    path = export(site, tmp_path / "e.jsonl")

    alone = run_standalone(tmp_path, str(path))
    pinned_run = run_standalone(tmp_path, str(path), "--public-key", pin())

    assert alone.returncode == 0 and pinned_run.returncode == 0, alone.stderr + pinned_run.stderr
    assert alone.stdout == pinned_run.stdout  # scripts reading the OK line see no change
    assert "NOTE: no key was pinned" in alone.stderr
    assert "the file itself (its header's keys)" in alone.stderr
    assert "--public-key" in alone.stderr
    assert pinned_run.stderr == ""
