"""Tampering with the database directly is caught by `audit verify` and the standalone verifier.

The tampering runs as raw SQL, as an attacker with database access would, past the model's
append-only guard.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import nacl.signing
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction

from audit import chain, keys, merkle, note
from audit.checkpoints import origin_for
from audit.models import AuditChainHead, AuditKind, AuditRecord
from audit.services import append_record
from sill.accounts.models import Site

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
TABLE = AuditRecord._meta.db_table


def build_chain(site: Site, n: int = 5) -> None:
    for i in range(1, n + 1):
        with transaction.atomic():
            append_record(
                site=site,
                kind=AuditKind.SETTLEMENT,
                body={"refund_id": f"rf_{i}", "amount_minor": 8900, "currency": "USD"},
            )


def sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def column(site: Site, seq: int, name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {name} FROM {TABLE} WHERE site_id = %s AND seq = %s", [site.pk, seq]
        )
        return cursor.fetchone()[0]


def set_column(site: Site, seq: int, name: str, value: object) -> None:
    sql(f"UPDATE {TABLE} SET {name} = %s WHERE site_id = %s AND seq = %s", value, site.pk, seq)


def flip_char(text: str, index: int, alphabet: str) -> str:
    replacement = alphabet[(alphabet.index(text[index]) + 1) % len(alphabet)]
    return text[:index] + replacement + text[index + 1 :]


def change_payload_byte(site: Site) -> None:
    payload = column(site, 3, "payload")
    assert '"amount_minor":8900' in payload
    set_column(site, 3, "payload", payload.replace('"amount_minor":8900', '"amount_minor":9900'))


def change_hash_byte(site: Site) -> None:
    set_column(site, 3, "hash", flip_char(column(site, 3, "hash"), 20, "0123456789abcdef"))


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def change_signature_byte(site: Site) -> None:
    set_column(site, 3, "signature", flip_char(column(site, 3, "signature"), 10, B64URL))


def change_kind(site: Site) -> None:
    set_column(site, 3, "kind", AuditKind.DISPUTE.value)


# Deeper than Python's parsers recurse: one UPDATE by someone with database access.
NESTED_PAST_THE_RECURSION_LIMIT = "[" * 100_000 + "]" * 100_000


def nest_payload_deeply(site: Site) -> None:
    set_column(site, 3, "payload", NESTED_PAST_THE_RECURSION_LIMIT)


def delete_middle(site: Site) -> None:
    sql(f"DELETE FROM {TABLE} WHERE site_id = %s AND seq = 3", site.pk)


def swap_contents(site: Site) -> None:
    """Records 3 and 4 trade payload, hash and signature; the seq columns stay."""
    fields = ("payload", "hash", "signature")
    third = [column(site, 3, f) for f in fields]
    fourth = [column(site, 4, f) for f in fields]
    set_column(site, 3, "hash", "x" * 64)  # (site, hash) is unique: free the value first
    for name, value in zip(fields, third, strict=True):
        set_column(site, 4, name, value)
    for name, value in zip(fields, fourth, strict=True):
        set_column(site, 3, name, value)


def swap_seqs(site: Site) -> None:
    """Records 3 and 4 trade places in the order."""
    set_column(site, 3, "seq", 1000)
    set_column(site, 4, "seq", 3)
    set_column(site, 1000, "seq", 4)


TAMPERS: dict[str, tuple[Callable[[Site], None], int]] = {
    "payload byte": (change_payload_byte, 3),
    "hash byte": (change_hash_byte, 3),
    "signature byte": (change_signature_byte, 3),
    "kind column": (change_kind, 3),
    "payload nested past the recursion limit": (nest_payload_deeply, 3),
    "deleted middle record": (delete_middle, 4),  # named: the record after the gap
    "swapped contents": (swap_contents, 3),
    "swapped seqs": (swap_seqs, 3),
}


def export(site: Site, path: Path) -> Path:
    call_command("audit", "export", "--site", site.pk, "--output", str(path))
    return path


def run_standalone(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a copy of the verifier away from the repo, in isolated mode: Sill is not importable."""
    script = tmp_path / "verify_export.py"
    if not script.exists():
        shutil.copy(ROOT / "audit" / "verify_export.py", script)
    return subprocess.run(
        [sys.executable, "-I", str(script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def verify_command(*args: str) -> tuple[str, str, CommandError | None]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("audit", "verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), exc
    return out.getvalue(), err.getvalue(), None


def test_it_passes_an_untouched_chain(site: Site, tmp_path: Path) -> None:
    build_chain(site)
    out, _, error = verify_command("--site", site.pk)
    assert error is None
    assert out.strip() == f"site {site.pk}: 5 records OK"

    result = run_standalone(tmp_path, str(export(site, tmp_path / "export.jsonl")))
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[0]
        == f"OK: 5 records of log {origin_for(site.pk)}, matching their signed checkpoint"
    )


@pytest.mark.parametrize("name", TAMPERS)
def test_it_names_the_first_bad_record(
    name: str, site: Site, other_site: Site, tmp_path: Path
) -> None:
    tamper, bad_seq = TAMPERS[name]
    build_chain(site)
    build_chain(other_site, 2)
    tamper(site)

    out, err, error = verify_command()
    assert error is not None and error.returncode != 0
    assert f"site {site.pk}: FAILED at seq {bad_seq}: " in err
    assert f"site {other_site.pk}: 2 records OK" in out

    result = run_standalone(tmp_path, str(export(site, tmp_path / "export.jsonl")))
    assert result.returncode == 1
    assert result.stderr.startswith(f"FAILED at seq {bad_seq}: "), result.stderr


def test_it_catches_a_deleted_last_record_with_the_chain_head(site: Site) -> None:
    build_chain(site)
    sql(f"DELETE FROM {TABLE} WHERE site_id = %s AND seq = 5", site.pk)

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 5: " in err


def test_it_catches_a_deleted_chain_head(site: Site) -> None:
    build_chain(site, 2)
    AuditChainHead.objects.filter(site=site).delete()

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 1: " in err


def forge_chain(site: Site, attacker: nacl.signing.SigningKey, key_id: str) -> None:
    """Rewrite record 2 and re-hash and re-sign everything after it with the attacker's key."""
    prev = column(site, 1, "hash")
    for seq in range(2, 6):
        payload = json.loads(column(site, seq, "payload"))
        payload["body"]["amount_minor"] = 1
        text = chain.canonical(payload)
        digest = chain.record_hash(prev, text)
        set_column(site, seq, "hash", f"{seq:064x}")  # free the unique hash value
        for name, value in (
            ("payload", text.decode()),
            ("prev_hash", prev),
            ("hash", digest),
            ("signature", chain.sign_hash(digest, attacker)),
            ("key_id", key_id),
        ):
            set_column(site, seq, name, value)
        prev = digest


def test_it_trusts_only_the_keys_given_on_the_command_line(site: Site, tmp_path: Path) -> None:
    build_chain(site)
    attacker = nacl.signing.SigningKey.generate()
    forged_id = "sill-attacker00000000"
    forge_chain(site, attacker, forged_id)
    path = export(site, tmp_path / "export.jsonl")
    # The attacker also controls the file, header included.
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["public_keys"][forged_id] = chain.b64url_encode(bytes(attacker.verify_key))
    # ...and the checkpoint line: Sill's signed tree still holds the genuine records (the
    # forgery shows against it), so the attacker signs a checkpoint of the forged ones.
    records = [json.loads(line) for line in lines[1:-1]]
    root = merkle.root_of([merkle.record_leaf_hash(r["payload"]) for r in records])
    forged = note.sign(
        note.Checkpoint(origin=header["origin"], size=len(records), root=root).text(),
        name=header["origin"],
        signing_key=attacker,
    )
    lines[-1] = json.dumps({"type": "checkpoint", "note": forged})
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")

    assert run_standalone(tmp_path, str(path)).returncode == 0  # consistent, but not genuine

    key_id, key = keys.signing_key()
    trusted = f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}"
    result = run_standalone(tmp_path, str(path), "--public-key", trusted)
    assert result.returncode == 1
    assert result.stderr.startswith("FAILED at seq 2: unknown key_id"), result.stderr

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert "FAILED at seq 2: unknown key_id" in err


def test_it_verifies_a_genuine_export_with_a_trusted_key(site: Site, tmp_path: Path) -> None:
    build_chain(site, 3)
    key_id, key = keys.signing_key()
    trusted = f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}"
    path = export(site, tmp_path / "export.jsonl")

    result = run_standalone(tmp_path, str(path), "--public-key", trusted)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[0]
        == f"OK: 3 records of log {origin_for(site.pk)}, matching their signed checkpoint"
    )

    other = nacl.signing.SigningKey.generate().verify_key
    result = run_standalone(
        tmp_path, str(path), "--public-key", f"{key_id}={chain.b64url_encode(bytes(other))}"
    )
    assert result.returncode == 1
    assert result.stderr.startswith("FAILED at seq 1: signature does not verify")


def test_it_exports_json_lines(site: Site) -> None:
    build_chain(site, 2)
    out = io.StringIO()
    call_command("audit", "export", "--site", site.pk, stdout=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]

    key_id, key = keys.signing_key()
    assert lines[0] == {
        "type": "header",
        "format": "sill-audit-export-v1",
        "site_id": site.pk,
        "origin": f"sill.example/audit/{site.pk}",
        "public_keys": {key_id: chain.b64url_encode(bytes(key.verify_key))},
        "key_windows": {key_id: {"valid_from": None, "valid_until": None}},
    }
    assert [line["seq"] for line in lines[1:-1]] == [1, 2]
    assert lines[-1]["type"] == "checkpoint" and lines[-1]["note"].split("\n")[1] == "2"
    assert set(lines[1]) == {
        "type", "site_id", "seq", "kind", "payload", "prev_hash", "hash", "signature", "key_id"
    }  # fmt: skip
    assert lines[2]["payload"] == AuditRecord.objects.get(site=site, seq=2).payload


def test_it_refuses_an_unknown_site() -> None:
    with pytest.raises(CommandError, match="no site"):
        call_command("audit", "verify", "--site", "nope")


def test_a_key_id_that_is_not_a_string_is_an_unknown_key_not_a_crash(
    site: Site, tmp_path: Path
) -> None:
    build_chain(site, 2)
    path = export(site, tmp_path / "export.jsonl")
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    record["key_id"] = ["not", "a", "string"]
    path.write_text("\n".join([*lines[:2], json.dumps(record)]) + "\n")
    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1
    assert "unknown key_id" in result.stderr and "Traceback" not in result.stderr


def test_a_hash_that_is_not_ascii_is_a_problem_not_a_crash(site: Site, tmp_path: Path) -> None:
    build_chain(site, 3)
    path = export(site, tmp_path / "export.jsonl")
    lines = path.read_text().splitlines()
    second, third = json.loads(lines[2]), json.loads(lines[3])
    second["hash"] = third["prev_hash"] = "\u00e9" * 64  # the next record links to it
    path.write_text("\n".join([*lines[:2], json.dumps(second), json.dumps(third), *lines[4:]]))
    result = run_standalone(tmp_path, str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "FAILED at seq 2: hash is not 64 lowercase hex digits" in result.stderr
    assert "FAILED at seq 3: prev_hash is not 64 lowercase hex digits" in result.stderr


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_body_holding_a_unicode_line_separator_verifies_standalone(
    site: Site, tmp_path: Path, separator: str
) -> None:
    """JSON strings may hold these unescaped (RFC 8785 leaves them, the export writes them
    as they are); str.splitlines() would cut the record's line in two."""
    with transaction.atomic():
        append_record(
            site=site, kind=AuditKind.REASON_CHANGE, body={"note": f"line one{separator}line two"}
        )
    build_chain(site, 1)
    result = run_standalone(tmp_path, str(export(site, tmp_path / "export.jsonl")))
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[0]
        == f"OK: 2 records of log {origin_for(site.pk)}, matching their signed checkpoint"
    )


def test_it_catches_a_moved_created_at(site: Site) -> None:
    """created_at is not hashed; Activity shows it, filters and downloads by it."""
    build_chain(site, 3)
    moved = AuditRecord.objects.get(site=site, seq=2).created_at - timedelta(days=40)
    set_column(site, 2, "created_at", moved)

    _, err, error = verify_command("--site", site.pk)
    assert error is not None
    assert f"site {site.pk}: FAILED at seq 2: created_at " in err
    assert "is not the signed recorded_at" in err


@pytest.mark.parametrize("action", ["export", "bundle"])
def test_an_output_it_cannot_write_is_a_command_error_and_leaves_no_file(
    site: Site, tmp_path: Path, action: str
) -> None:
    # Was a FileNotFoundError traceback (a mistyped folder, at 3 a.m.).
    build_chain(site, 2)
    target = tmp_path / "no-such-folder" / "audit.jsonl"
    which = ["--site", site.pk] if action == "export" else ["--refund", "rf_1"]
    with pytest.raises(CommandError, match=r"cannot write .*no-such-folder"):
        call_command("audit", action, *which, "--output", str(target))
    with pytest.raises(CommandError, match="cannot write"):
        call_command("audit", action, *which, "--output", str(tmp_path))  # a folder
    assert sorted(p.name for p in tmp_path.iterdir()) == []
