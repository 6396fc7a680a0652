"""Rail credentials are encrypted at rest and never shown."""

from __future__ import annotations

import pytest

from sill.rails.models import RailAccount
from sill.rails.secrets import RailSecretUnreadable, decrypt_secret, encrypt_secret

KEY = "sk_test_51SecretValueNobodyShouldSee"


def test_it_round_trips():
    blob = encrypt_secret(KEY)

    assert KEY.encode() not in blob
    assert decrypt_secret(blob) == KEY
    assert encrypt_secret(KEY) != blob  # a fresh nonce every time


def test_an_empty_secret_stores_nothing():
    assert encrypt_secret("") == b""
    assert decrypt_secret(b"") == ""


def test_it_cannot_be_read_after_secret_key_rotation(settings):
    blob = encrypt_secret(KEY)
    settings.SECRET_KEY = "another-secret-key-" + "y" * 40

    with pytest.raises(RailSecretUnreadable, match="Re-enter"):
        decrypt_secret(blob)


def test_it_round_trips_through_the_database(site):
    account = RailAccount(site=site, rail="stripe")
    account.set_secret(KEY)
    account.save()

    stored = RailAccount.objects.get(pk=account.pk)

    assert stored.has_secret
    assert KEY.encode() not in bytes(stored.secret_encrypted)
    assert stored.get_secret() == KEY


def test_it_is_not_in_str_or_repr(site):
    account = RailAccount(site=site, rail="stripe")
    account.set_secret(KEY)
    account.save()

    assert KEY not in str(account)
    assert KEY not in repr(account)
