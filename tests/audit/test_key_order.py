"""A retired key cannot go on signing by backdating: a record's time is its signer's own word,
so once a key has signed, a later record signed by a key whose window starts before that
key's is refused, by `audit verify` and by the standalone verifier; a genuine log across
rotations still verifies in both."""

from __future__ import annotations

import importlib
import io
import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.utils import timezone

from audit import bundles, chain, keys, services, verify_export
from audit.checkpoints import origin_for
from audit.models import AuditChainHead, AuditKey, AuditRecord
from audit.selectors import chain_verification
from sill.accounts.models import Site
from tests.audit.test_tamper import build_chain, export, run_standalone

pytestmark = pytest.mark.django_db

RETIRED = "signed by a retired key after its successor signed"


@pytest.fixture
def switch_now(settings):
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0


def rotate() -> keys.KeyWindow:
    """A rotation that has taken effect when this returns."""
    window = keys.rotate_key()
    wait_until(window.valid_from)
    return window


def wait_until(at: datetime | None) -> None:
    assert at is not None
    while timezone.now() < at:
        time.sleep(0.001)


def key_ids(site: Site) -> list[str]:
    return list(
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("key_id", flat=True)
    )


def pinned(key_id: str, key: nacl.signing.SigningKey) -> str:
    return f"{key_id}={chain.b64url_encode(bytes(key.verify_key))}"


def test_a_retired_key_cannot_sign_after_its_successor_by_backdating(
    site: Site, switch_now, tmp_path: Path, monkeypatch
) -> None:
    configured_id, configured = keys.signing_key()
    build_chain(site, 1)
    successor = rotate()
    build_chain(site, 1)
    # The retired key signs on: its record timed inside its own window.
    assert successor.valid_from is not None
    backdated = successor.valid_from - timedelta(seconds=1)
    backdated = backdated.replace(microsecond=backdated.microsecond // 1000 * 1000)  # as timed
    monkeypatch.setattr(services, "_now_ms", lambda: backdated)
    # Sill itself never times a record before the one it follows (the next test): this is
    # someone holding the retired key and the database, with the head's time taken out.
    AuditChainHead.objects.filter(site=site).update(last_recorded_at=None)
    build_chain(site, 1)
    monkeypatch.undo()
    assert key_ids(site) == [configured_id, successor.key_id, configured_id]

    result = chain_verification(site)
    assert not result.ok and result.first_bad_seq == 3, result
    assert result.problem.startswith(RETIRED)
    assert successor.key_id in result.problem

    path = export(site, tmp_path / "e.jsonl")
    for pins in ((), ("--public-key", pinned(configured_id, configured))):
        standalone = run_standalone(tmp_path, str(path), *pins)
        assert standalone.returncode == 1
        assert standalone.stderr.startswith(f"FAILED at seq 3: {RETIRED}"), standalone.stderr
    # An evidence bundle's records are taken in seq order whatever order it lists them in.
    bundle = bundles.refund_bundle(site=site, refund_id="rf_1")
    bundle["records"].reverse()
    _, problems = verify_export.verify_bundle(bundle, None, None)
    assert [p for p in problems if RETIRED in p] == [f"FAILED at seq 3: {RETIRED}: " + (
        f"{configured_id}'s window starts before that of {successor.key_id}, which signed seq 2"
    )]  # fmt: skip


def test_a_host_whose_clock_runs_behind_at_a_key_switch_keeps_the_log_verifiable(
    site: Site, switch_now, tmp_path: Path, monkeypatch, caplog
) -> None:
    """Two hosts of one Sill, their clocks 1.5 s apart around a key switch: the one ahead
    signs with the new key; the one behind, appending right after, used to time its record
    before the switch and sign it with the retired key, and the honest log failed
    verification. It now takes its predecessor's time and key."""
    configured_id, configured = keys.signing_key()
    build_chain(site, 1)
    successor = rotate()
    assert successor.valid_from is not None
    ahead = as_timed(successor.valid_from + timedelta(seconds=1))
    behind = as_timed(successor.valid_from - timedelta(milliseconds=500))
    monkeypatch.setattr(services, "_now_ms", lambda: ahead)
    build_chain(site, 1)
    monkeypatch.setattr(services, "_now_ms", lambda: behind)
    with caplog.at_level("WARNING", logger="audit.services"):
        build_chain(site, 1)
    monkeypatch.undo()

    assert key_ids(site) == [configured_id, successor.key_id, successor.key_id]
    third = AuditRecord.objects.get(site=site, seq=3)
    assert third.created_at == ahead
    assert chain.parse_recorded_at(json.loads(third.payload)["recorded_at"]) == ahead
    assert "1.500 s ahead of this host's clock" in caplog.text
    assert chain_verification(site).ok
    path = export(site, tmp_path / "e.jsonl")
    standalone = run_standalone(
        tmp_path, str(path), "--public-key", pinned(configured_id, configured)
    )
    assert standalone.returncode == 0, standalone.stderr


def test_heads_before_the_column_take_their_last_records_time(site: Site, other_site) -> None:
    """Migration audit 0014 gives each existing head its last record's time."""
    build_chain(site, 3)
    build_chain(other_site, 1)
    AuditChainHead.objects.update(last_recorded_at=None)
    fill = importlib.import_module("audit.migrations.0014_chainhead_last_recorded_at")
    fill.fill_from_last_records(django_apps, None)
    last = AuditRecord.objects.get(site=site, seq=3).created_at
    assert AuditChainHead.objects.get(site=site).last_recorded_at == last
    other_last = AuditRecord.objects.get(site=other_site, seq=1).created_at
    assert AuditChainHead.objects.get(site=other_site).last_recorded_at == other_last


def as_timed(at: datetime) -> datetime:
    """``at`` to the millisecond, as records are timed."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def test_a_genuine_log_across_two_rotations_verifies(
    site: Site, switch_now, tmp_path: Path
) -> None:
    configured_id, configured = keys.signing_key()
    build_chain(site, 2)
    call_command("audit", "rotate-key", stdout=io.StringIO())  # and its key_change record
    first = AuditKey.objects.get()
    wait_until(first.valid_from)
    build_chain(site, 1)
    second = rotate()
    build_chain(site, 2)
    ids = key_ids(site)
    assert ids[:2] == [configured_id] * 2 and ids[3:] == [first.key_id] + [second.key_id] * 2

    assert chain_verification(site).ok
    path = export(site, tmp_path / "e.jsonl")
    for pins in ((), ("--public-key", pinned(configured_id, configured))):
        standalone = run_standalone(tmp_path, str(path), *pins)
        assert standalone.returncode == 0, standalone.stderr
        assert (
            standalone.stdout.splitlines()[0]
            == f"OK: 6 records of log {origin_for(site.pk)}, matching their signed checkpoint"
        )
