"""`audit rotate-key`: a new key with a validity window; a chain spanning both keys verifies,
in Sill and in the standalone verifier; a record signed outside its key's window, or by a key
nobody lists, is refused; the keys are published with their windows."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import nacl.signing
import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client

from audit import chain, keys
from audit.models import AuditKey, AuditKind, AuditRecord
from audit.selectors import chain_verification
from audit.services import append_record
from sill.accounts.models import Site
from tests.audit.test_tamper import export, run_standalone, set_column

pytestmark = pytest.mark.django_db


def append(site: Site, n: int) -> None:
    for i in range(n):
        with transaction.atomic():
            append_record(site=site, kind=AuditKind.SETTLEMENT, body={"refund_id": f"rf_{i}"})


@pytest.fixture
def switch_now(settings):
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 0


def test_a_chain_across_a_rotation_verifies(site: Site, switch_now, tmp_path: Path):
    append(site, 2)
    old_id = keys.signing_key()[0]
    out = io.StringIO()
    call_command("audit", "rotate-key", stdout=out)
    new_id = keys.signing_key()[0]
    assert new_id != old_id and new_id in out.getvalue()
    append(site, 2)

    ids = list(
        AuditRecord.objects.filter(site=site).order_by("seq").values_list("key_id", flat=True)
    )
    # Two before, the key_change record of the rotation and two after, by the new key.
    assert ids[:2] == [old_id, old_id] and set(ids[3:]) == {new_id}
    assert chain_verification(site).ok
    assert run_standalone(tmp_path, str(export(site, tmp_path / "e.jsonl"))).returncode == 0


def test_the_new_key_waits_for_its_window(site: Site, settings):
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 60
    old_id = keys.signing_key()[0]
    window = keys.rotate_key()
    assert keys.signing_key()[0] == old_id  # not valid yet: every process loads it first
    assert keys.key_windows()[old_id].valid_until == window.valid_from
    with pytest.raises(ValueError, match="waiting to take effect"):
        keys.rotate_key()


def test_a_record_signed_by_the_old_key_after_its_window_is_refused(site: Site, switch_now):
    append(site, 1)
    _, old = keys.signing_key()
    old_id = keys.key_id_for(old.verify_key)
    keys.rotate_key()
    # The new key takes over at the next whole millisecond: a record timed before it is the
    # old key's to sign (then the test's tampering would change nothing).
    while keys.signing_key()[0] == old_id:
        time.sleep(0.001)
    append(site, 1)
    record = AuditRecord.objects.get(site=site, seq=2)
    set_column(site, 2, "signature", chain.sign_hash(record.hash, old))
    set_column(site, 2, "key_id", old_id)

    result = chain_verification(site)
    assert not result.ok and result.first_bad_seq == 2
    assert "outside its validity window" in result.problem


def test_a_record_signed_by_an_unlisted_key_is_refused(site: Site, switch_now, tmp_path: Path):
    append(site, 2)
    keys.rotate_key()
    append(site, 1)
    stranger = nacl.signing.SigningKey.generate()
    record = AuditRecord.objects.get(site=site, seq=3)
    set_column(site, 3, "signature", chain.sign_hash(record.hash, stranger))
    set_column(site, 3, "key_id", keys.key_id_for(stranger.verify_key))

    result = chain_verification(site)
    assert not result.ok and "unknown key_id" in result.problem
    standalone = run_standalone(tmp_path, str(export(site, tmp_path / "e.jsonl")))
    assert standalone.returncode == 1 and "FAILED at seq 3: unknown key_id" in standalone.stderr


def test_the_keys_are_published_with_their_windows(site: Site, switch_now):
    first = keys.signing_key()[0]
    keys.rotate_key()
    second = AuditKey.objects.get().key_id

    listed = Client().get("/.well-known/sill-audit-keys.json").json()["keys"]
    assert [k["key_id"] for k in listed] == [first, second]
    assert listed[0]["valid_from"] is None and listed[0]["valid_until"] == listed[1]["valid_from"]
    assert listed[1]["valid_until"] is None
    assert all(len(chain.b64url_decode(k["public_key"])) == 32 for k in listed)
    assert "seed" not in str(listed) and "sealed" not in str(listed)


def test_the_rotation_record_names_the_key_it_retires_and_when(site: Site, client_for, settings):
    """An auditor reading the log alone learns which key signed the records before the
    rotation, until when, and which key (endorsed by whom) signs after it."""
    settings.SILL_AUDIT_KEY_SWITCH_SECONDS = 60
    retired_id, retired = keys.signing_key()
    call_command("audit", "rotate-key", stdout=io.StringIO())
    new = AuditKey.objects.get()

    record = AuditRecord.objects.get(site=site, kind=AuditKind.KEY_CHANGE)
    body = json.loads(record.payload)["body"]
    assert body["key_id"] == new.key_id and body["public_key"] == new.public_key
    assert (body["endorsement"], body["endorsed_by"]) == (new.endorsement, retired_id)
    assert body["retired_key_id"] == retired_id
    assert body["retired_public_key"] == chain.b64url_encode(bytes(retired.verify_key))
    # The old key's window ends, to the millisecond, where the new one's begins.
    assert body["retired_at"] == body["valid_from"] == keys.utc_ms(new.valid_from)
    assert (body["actor"], body["actor_name"]) == (None, "operator (manage.py)")
    assert record.key_id == retired_id  # the rotation itself is signed by the retiring key
    page = client_for("owner").get("/activity/", {"kind": "key_change"}).content.decode()
    assert f"Audit signing key {retired_id} retired, {new.key_id} signs from" in page
