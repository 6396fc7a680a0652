"""The audit signing key: configured, or generated once under the data dir; rotation."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import nacl.signing
import pytest
from django.core.exceptions import ImproperlyConfigured

from audit import chain, keys

pytestmark = pytest.mark.django_db  # the rotated keys live in the database


@pytest.fixture
def data_dir(settings, tmp_path: Path) -> Path:
    settings.SILL_DATA_DIR = tmp_path
    settings.SILL_AUDIT_SIGNING_KEY = None
    return tmp_path


def test_it_generates_a_key_once_and_reuses_it(data_dir: Path) -> None:
    key_id, key = keys.signing_key()

    path = data_dir / "audit-signing-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert chain.b64url_decode(path.read_text().strip()) == key.encode()
    assert key_id == "sill-" + hashlib.sha256(bytes(key.verify_key)).hexdigest()[:16]

    keys._signing_key.cache_clear()  # as a new process would
    assert keys.signing_key()[1].encode() == key.encode()
    assert list(data_dir.iterdir()) == [path]


def test_it_uses_the_configured_seed(data_dir: Path, settings) -> None:
    seed = bytes(range(32))
    settings.SILL_AUDIT_SIGNING_KEY = chain.b64url_encode(seed)

    key_id, key = keys.signing_key()

    assert key.encode() == seed
    assert key_id == "sill-" + hashlib.sha256(bytes(key.verify_key)).hexdigest()[:16]
    assert not (data_dir / "audit-signing-key").exists()


@pytest.mark.parametrize("bad", ["short", chain.b64url_encode(bytes(31)), "not base64!"])
def test_it_refuses_a_bad_configured_seed(data_dir: Path, settings, bad: str) -> None:
    settings.SILL_AUDIT_SIGNING_KEY = bad
    with pytest.raises(ImproperlyConfigured):
        keys.signing_key()


def test_it_lists_rotated_public_keys(data_dir: Path) -> None:
    old = nacl.signing.SigningKey.generate().verify_key
    old_id = keys.key_id_for(old)
    (data_dir / "audit-public-keys.json").write_text(
        json.dumps({old_id: chain.b64url_encode(bytes(old))})
    )

    current_id, current = keys.signing_key()
    found = keys.public_keys()

    assert set(found) == {old_id, current_id}
    assert bytes(found[old_id]) == bytes(old)
    assert bytes(found[current_id]) == bytes(current.verify_key)
