"""Rail credentials are encrypted at rest, bound to their site and rail, and never shown."""

from __future__ import annotations

import pytest
from django.test import override_settings

from sill.rails.admin import RailAccountForm
from sill.rails.models import RailAccount
from sill.rails.secrets import (
    VERSION_2,
    RailSecretUnreadable,
    SecretBinding,
    decrypt_secret,
    encrypt_secret,
    open_secret,
)
from tests.rails.legacy_secrets import legacy_blob

KEY = "sk_test_51SecretValueNobodyShouldSee"
HERE = SecretBinding(site_id="01JSITEAAAAAAAAAAAAAAAAAAA", rail="stripe")


def test_it_round_trips():
    blob = encrypt_secret(KEY, binding=HERE)

    assert blob[0] == VERSION_2
    assert KEY.encode() not in blob
    assert decrypt_secret(blob, binding=HERE) == KEY
    assert encrypt_secret(KEY, binding=HERE) != blob  # a fresh nonce every time


def test_an_empty_secret_stores_nothing():
    assert encrypt_secret("", binding=HERE) == b""
    assert decrypt_secret(b"", binding=HERE) == ""
    assert decrypt_secret(None, binding=HERE) == ""


@pytest.mark.parametrize(
    "elsewhere",
    [
        SecretBinding(site_id="01JSITEBBBBBBBBBBBBBBBBBBB", rail="stripe"),
        SecretBinding(site_id=HERE.site_id, rail="paypal"),
        SecretBinding(site_id=HERE.site_id, rail="stripe", field="webhook_secret"),
    ],
)
def test_it_does_not_decrypt_for_another_site_rail_or_field(elsewhere):
    blob = encrypt_secret(KEY, binding=HERE)

    with pytest.raises(RailSecretUnreadable, match="another site or rail") as caught:
        decrypt_secret(blob, binding=elsewhere)

    assert KEY not in caught.value.message


def test_the_binding_encoding_is_unambiguous():
    assert (
        SecretBinding(site_id="ab", rail="c").aad() != SecretBinding(site_id="a", rail="bc").aad()
    )


def test_a_blob_copied_to_another_sites_row_is_unreadable(site, other_site):
    ours = RailAccount(site=site, rail="stripe")
    ours.set_secret(KEY)
    ours.save()
    theirs = RailAccount.objects.create(site=other_site, rail="stripe")
    mock = RailAccount.objects.create(site=site, rail="mock")

    for target in (theirs, mock):
        RailAccount.objects.filter(pk=target.pk).update(secret_encrypted=ours.secret_encrypted)
        copied = RailAccount.objects.get(pk=target.pk)
        with pytest.raises(RailSecretUnreadable):
            copied.get_secret()

    assert RailAccount.objects.get(pk=ours.pk).get_secret() == KEY


def test_a_tampered_blob_is_unreadable():
    blob = bytearray(encrypt_secret(KEY, binding=HERE))
    blob[-1] ^= 0x01

    with pytest.raises(RailSecretUnreadable, match="Settings → Rails"):
        decrypt_secret(bytes(blob), binding=HERE)


def test_it_cannot_be_read_with_another_secret_key_and_no_fallback():
    blob = encrypt_secret(KEY, binding=HERE)

    with (
        override_settings(SECRET_KEY="another-secret-key-" + "y" * 40, SECRET_KEY_FALLBACKS=[]),
        pytest.raises(RailSecretUnreadable, match="SILL_SECRET_KEY_FALLBACKS"),
    ):
        decrypt_secret(blob, binding=HERE)


def test_a_legacy_blob_still_decrypts_and_is_not_current(settings):
    blob = legacy_blob(KEY, settings.SECRET_KEY)

    opened = open_secret(blob, binding=HERE)

    assert (opened.plain, opened.current, opened.stale_because) == (
        KEY,
        False,
        "the legacy format",
    )


def test_a_legacy_blob_is_rewritten_bound_on_first_read(site, settings):
    account = RailAccount.objects.create(
        site=site, rail="stripe", secret_encrypted=legacy_blob(KEY, settings.SECRET_KEY)
    )

    assert RailAccount.objects.get(pk=account.pk).get_secret() == KEY

    stored = bytes(RailAccount.objects.get(pk=account.pk).secret_encrypted)
    assert stored[0] == VERSION_2 and open_secret(stored, binding=account.secret_binding()).current


def test_it_round_trips_through_the_database(site):
    account = RailAccount(site=site, rail="stripe")
    account.set_secret(KEY)
    account.save()

    stored = RailAccount.objects.get(pk=account.pk)

    assert stored.has_secret
    assert KEY.encode() not in bytes(stored.secret_encrypted)
    assert stored.get_secret() == KEY


def test_it_needs_a_site_and_rail_before_a_secret():
    with pytest.raises(ValueError, match="site and rail"):
        RailAccount(rail="stripe").set_secret(KEY)


def test_it_is_not_in_str_or_repr(site):
    account = RailAccount(site=site, rail="stripe")
    account.set_secret(KEY)
    account.save()

    assert KEY not in str(account)
    assert KEY not in repr(account)


def test_the_admin_refuses_to_move_a_stored_key_to_another_site(site, other_site):
    account = RailAccount(site=site, rail="stripe")
    account.set_secret(KEY)
    account.save()
    data = {"site": other_site.pk, "rail": "stripe", "mode": "test", "config": "{}"}

    moved = RailAccountForm(instance=account, data=data)
    assert not moved.is_valid()
    assert "enter the API key again" in str(moved.errors)

    re_entered = RailAccountForm(instance=account, data={**data, "new_secret": KEY})
    assert re_entered.is_valid(), re_entered.errors
    assert re_entered.save().get_secret() == KEY
