"""A rotated audit key is trusted only when the configured key (the anchor outsiders pin)
endorsed it: a key row someone wrote into the database, without SECRET_KEY or the signing
key, neither verifies records nor signs; `audit rotate-key` endorses its key; the standalone
verifier, given pinned keys, trusts a key in the file only on a pinned key's endorsement; the
migration endorses the keys rotated before endorsements existed."""

from __future__ import annotations

import importlib
import io
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client
from django.utils import timezone

from audit import bundles, chain, checkpoints, keys, merkle, note, verify_export
from audit.checkpoints import origin_for
from audit.models import AuditKey, AuditRecord
from audit.selectors import chain_verification
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export, run_standalone

pytestmark = pytest.mark.django_db

MIGRATION = "0013_auditkey_endorsement"


@pytest.fixture
def switch_now(settings):
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0


def insert_key_row(key: nacl.signing.SigningKey) -> str:
    """What someone with database access only can write: their own public key, valid now, and
    a seed Sill cannot unseal (they do not have SECRET_KEY)."""
    key_id = keys.key_id_for(key.verify_key)
    AuditKey.objects.create(
        key_id=key_id,
        public_key=chain.b64url_encode(bytes(key.verify_key)),
        sealed_seed=b"junk",
        valid_from=timezone.now(),
    )
    keys.forget_rotated_keys()  # as every process's next reload would
    return key_id


def wait_until(at: datetime) -> None:
    while timezone.now() < at:
        time.sleep(0.001)


def pinned(key_id: str, key: nacl.signing.SigningKey) -> str:
    return f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}"


def statement(key_id: str, public_key: str, valid_from: datetime) -> bytes:
    """The endorsement statement, written out here so its format is pinned by the test."""
    stamp = valid_from.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return f"sill-audit-key-endorsement-v1\n{key_id}\n{public_key}\n{stamp}\n".encode()


def test_records_signed_by_a_key_row_written_into_the_database_fail(
    site: Site, tmp_path: Path, monkeypatch
) -> None:
    build_chain(site, 2)
    kept = checkpoints.write_checkpoint(site=site)  # a checkpoint kept outside Sill
    assert kept is not None
    intruder = nacl.signing.SigningKey.generate()
    intruder_id = insert_key_row(intruder)
    # A record as a hand-written row would be signed: through the normal path, by their key.
    monkeypatch.setattr(keys, "signing_key", lambda at=None: (intruder_id, intruder))
    build_chain(site, 1)
    monkeypatch.undo()
    assert AuditRecord.objects.get(site=site, seq=3).key_id == intruder_id

    for checkpoint_note in (None, kept.note):
        result = chain_verification(site, checkpoint_note=checkpoint_note)
        assert not result.ok and result.first_bad_seq == 3, result
        assert result.problem == f"unknown key_id {intruder_id!r}"

    # ...and a checkpoint they signed of their records is no checkpoint of Sill's.
    origin = checkpoints.origin_for(site.pk)
    payloads = AuditRecord.objects.filter(site=site).order_by("seq").values_list("payload")
    root = merkle.root_of([merkle.record_leaf_hash(p) for (p,) in payloads])
    theirs = note.sign(
        note.Checkpoint(origin=origin, size=3, root=root).text(), name=origin, signing_key=intruder
    )
    result = chain_verification(site, checkpoint_note=theirs)
    assert not result.ok and result.problem.startswith("the checkpoint does not verify")

    listed = Client().get("/.well-known/sill-audit-keys.json").json()["keys"]
    assert intruder_id not in [k["key_id"] for k in listed]
    standalone = run_standalone(tmp_path, str(export(site, tmp_path / "e.jsonl")))
    assert standalone.returncode == 1
    assert standalone.stderr.startswith(f"FAILED at seq 3: unknown key_id {intruder_id!r}")


def test_sill_never_signs_with_a_key_row_written_into_the_database(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    configured_id = keys.signing_key()[0]
    build_chain(site, 1)
    intruder_id = insert_key_row(nacl.signing.SigningKey.generate())

    with caplog.at_level(logging.ERROR, logger="audit.keys"):
        build_chain(site, 2)  # no unsealing of their seed: the row is not even considered
        assert keys.signing_key()[0] == configured_id
        assert intruder_id not in keys.key_windows() and intruder_id not in keys.public_keys()

    ids = AuditRecord.objects.filter(site=site).order_by("seq").values_list("key_id", flat=True)
    assert list(ids) == [configured_id] * 3
    assert chain_verification(site).ok
    named = [r for r in caplog.records if intruder_id in r.getMessage()]
    assert len(named) == 1 and named[0].levelno == logging.ERROR  # once per reload


def test_a_key_row_written_into_the_database_does_not_hold_rotation_back(switch_now) -> None:
    key_id = keys.key_id_for(nacl.signing.SigningKey.generate().verify_key)
    AuditKey.objects.create(
        key_id=key_id,
        public_key="x",
        sealed_seed=b"",
        valid_from=timezone.now() + timedelta(days=9),
    )
    rotated = keys.rotate_key()  # not "a rotated key is waiting to take effect"
    assert rotated.key_id in keys.key_windows() and key_id not in keys.key_windows()


def test_rotate_key_endorses_its_key_and_the_key_verifies(
    site: Site, switch_now, tmp_path: Path
) -> None:
    configured_id, configured = keys.signing_key()
    build_chain(site, 1)
    call_command("audit", "rotate-key", stdout=io.StringIO())
    row = AuditKey.objects.get()
    configured.verify_key.verify(
        statement(row.key_id, row.public_key, row.valid_from), chain.b64url_decode(row.endorsement)
    )
    wait_until(row.valid_from)
    build_chain(site, 2)

    assert AuditRecord.objects.get(site=site, seq=4).key_id == row.key_id
    assert chain_verification(site).ok
    listed = Client().get("/.well-known/sill-audit-keys.json").json()["keys"]
    entry = next(k for k in listed if k["key_id"] == row.key_id)
    assert entry["endorsement"] == row.endorsement and entry["endorsed_by"] == configured_id
    assert "endorsement" not in listed[0]  # the configured key is the anchor itself
    header = json.loads(export(site, tmp_path / "e.jsonl").read_text().split("\n")[0])
    assert header["key_windows"][row.key_id]["endorsement"] == row.endorsement
    assert header["key_windows"][row.key_id]["endorsed_by"] == configured_id


def _drop(window: dict, forger: nacl.signing.SigningKey, key_id: str, public_key: str) -> None:
    del window["endorsement"]


def _forge(window: dict, forger: nacl.signing.SigningKey, key_id: str, public_key: str) -> None:
    # The right statement, signed by a key nobody pinned.
    at = datetime.fromisoformat(window["valid_from"])
    window["endorsement"] = chain.b64url_encode(
        forger.sign(statement(key_id, public_key, at)).signature
    )


def _move(window: dict, forger: nacl.signing.SigningKey, key_id: str, public_key: str) -> None:
    # The genuine endorsement, on a window moved a day earlier.
    at = datetime.fromisoformat(window["valid_from"]) - timedelta(days=1)
    window["valid_from"] = at.isoformat()


EDITS = {"missing": _drop, "forged": _forge, "moved": _move}


@pytest.mark.parametrize("edit", [None, *EDITS])
def test_the_standalone_verifier_trusts_a_key_in_the_file_only_on_a_pinned_endorsement(
    site: Site, switch_now, tmp_path: Path, edit: str | None
) -> None:
    configured_id, configured = keys.signing_key()
    build_chain(site, 1)
    rotated = keys.rotate_key()
    wait_until(rotated.valid_from)  # type: ignore[arg-type]
    build_chain(site, 2)
    path = export(site, tmp_path / "e.jsonl")
    if edit is not None:
        lines = path.read_text().split("\n")
        header = json.loads(lines[0])
        public_key = header["public_keys"][rotated.key_id]
        EDITS[edit](
            header["key_windows"][rotated.key_id],
            nacl.signing.SigningKey.generate(),
            rotated.key_id,
            public_key,
        )
        path.write_text("\n".join([json.dumps(header), *lines[1:]]))

    result = run_standalone(tmp_path, str(path), "--public-key", pinned(configured_id, configured))
    if edit is None:
        assert result.returncode == 0, result.stderr
        assert (
            result.stdout.splitlines()[0]
            == f"OK: 3 records of log {origin_for(site.pk)}, matching their signed checkpoint"
        )
        bundle = bundles.refund_bundle(site=site, refund_id="rf_1")  # seqs 1 and 2
        trusted = {configured_id: configured.verify_key}
        assert verify_export.verify_bundle(bundle, trusted, None) == (2, [])
        return
    assert result.returncode == 1
    problems = result.stderr.splitlines()
    assert problems[0].startswith(f"FAILED at the header: key {rotated.key_id}: its "), problems
    assert "endorsement" in problems[0] and "pinned" in problems[0]
    assert f"FAILED at seq 2: unknown key_id {rotated.key_id!r}" in problems


def _run_migration() -> None:
    apps = MigrationLoader(connection).project_state(("audit", MIGRATION)).apps
    importlib.import_module(f"audit.migrations.{MIGRATION}").endorse_existing(apps, None)


def test_the_migration_endorses_the_keys_rotated_before_it(site: Site, switch_now) -> None:
    configured = keys.signing_key()[1]
    build_chain(site, 1)
    rotated = keys.rotate_key()
    # As rotate-key wrote it before endorsements: none, and valid_from to the microsecond.
    valid_from = rotated.valid_from + timedelta(microseconds=456)  # type: ignore[operator]
    AuditKey.objects.filter(key_id=rotated.key_id).update(endorsement="", valid_from=valid_from)
    keys.forget_rotated_keys()
    assert rotated.key_id not in keys.key_windows()

    _run_migration()

    row = AuditKey.objects.get()
    configured.verify_key.verify(
        statement(row.key_id, row.public_key, row.valid_from), chain.b64url_decode(row.endorsement)
    )
    assert keys.key_windows()[rotated.key_id].valid_from == valid_from
    wait_until(valid_from)
    build_chain(site, 1)
    assert AuditRecord.objects.get(site=site, seq=2).key_id == rotated.key_id
    assert chain_verification(site).ok


def test_the_migration_without_rotated_keys_loads_no_key(settings, tmp_path: Path) -> None:
    settings.SILL_AUDIT_SIGNING_KEY = None
    settings.SILL_DATA_DIR = tmp_path
    _run_migration()
    assert list(tmp_path.iterdir()) == []  # no development key was generated
    migration = importlib.import_module(f"audit.migrations.{MIGRATION}").Migration
    assert all(operation.reversible for operation in migration.operations)
