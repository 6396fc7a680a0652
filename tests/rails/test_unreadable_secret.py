"""A stored credential no key can read disables its rail, with what to do, and is never shown."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    ensure_mock_rail,
    key_unreadable,
    rail_for,
    usable_rail_account,
)

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"
HX = {"HTTP_HX_REQUEST": "true"}
SAVED_UNDER = "the-key-that-was-lost-" + "q" * 40
NOW = "the-current-secret-key-" + "c" * 40
OLD = "a-fallback-that-is-not-it-" + "f" * 40
TEST_KEY = "sk_test_51UnreadableKeyValueNeverShown0000XYZ9"
WHAT_TO_DO = (
    "re-enter the API key on Settings → Rails; if SECRET_KEY was changed on the server, "
    "whoever runs Sill can add the old one to SILL_SECRET_KEY_FALLBACKS instead"
)


@pytest.fixture
def unreadable_stripe(site) -> RailAccount:
    with override_settings(SECRET_KEY=SAVED_UNDER, SECRET_KEY_FALLBACKS=[]):
        account = RailAccount(site=site, rail="stripe", enabled=True)
        account.set_secret(TEST_KEY)
        account.save()
    return account


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[OLD])
def test_it_raises_rail_disabled_saying_what_to_do(unreadable_stripe, site, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RailDisabled) as caught:
        rail_for(site_id=site.pk, rail="stripe")

    assert caught.value.code == "rail_disabled"
    assert caught.value.message == (
        f"The Stripe rail is disabled because its stored API key cannot be read: {WHAT_TO_DO}."
    )
    assert "cannot be decrypted" in caplog.text
    assert TEST_KEY not in caplog.text and TEST_KEY not in caught.value.message
    # Asking again gives the same answer and writes nothing: there is nothing to loop on.
    before = bytes(RailAccount.objects.get(pk=unreadable_stripe.pk).secret_encrypted)
    with pytest.raises(RailDisabled):
        rail_for(site_id=site.pk, rail="stripe")
    assert bytes(RailAccount.objects.get(pk=unreadable_stripe.pk).secret_encrypted) == before


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[SAVED_UNDER])
def test_adding_the_old_key_as_a_fallback_brings_the_rail_back(unreadable_stripe, site):
    assert rail_for(site_id=site.pk, rail="stripe") is not None


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[OLD])
def test_the_settings_page_shows_the_unreadable_key(unreadable_stripe, client_for):
    client = client_for("owner")
    for extra in ({}, HX):
        response = client.get(URL, **extra)
        assert response.status_code == 200
        body = response.content.decode()
        assert "Key unreadable" in body and "On · key unreadable" in body
        assert "SILL_SECRET_KEY_FALLBACKS" in body
        assert "refused until its stored key can be read" in body
        assert TEST_KEY not in body and "XYZ9" not in body


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[OLD])
def test_saving_without_a_new_key_explains_instead_of_a_500(unreadable_stripe, client_for):
    response = client_for("owner").post(f"{URL}stripe/", {"secret_key": "", "mode": "test"})

    assert response.status_code == 422
    body = response.content.decode()
    assert "cannot be decrypted" in body and "neither the current one nor in" in body
    assert TEST_KEY not in body


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[OLD])
def test_re_entering_the_key_fixes_the_rail(unreadable_stripe, client_for, site):
    response = client_for("owner").post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})

    assert response.status_code == 303
    assert rail_for(site_id=site.pk, rail="stripe") is not None
    body = client_for("owner").get(URL).content.decode()
    assert "Key unreadable" not in body and "sk_test_…XYZ9" in body


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[OLD])
def test_a_decision_gets_the_same_refusal_without_a_query(unreadable_stripe, site):
    account = RailAccount.objects.get(pk=unreadable_stripe.pk)
    with CaptureQueriesContext(connection) as queries:
        refusal = key_unreadable(account)

    assert refusal is not None and refusal.code == "rail_disabled"
    with pytest.raises(RailDisabled) as built:
        rail_for(site_id=site.pk, rail="stripe")
    assert refusal.message == built.value.message
    assert queries.captured_queries == []
    with pytest.raises(RailDisabled) as usable:
        usable_rail_account(site_id=site.pk, rail="stripe")
    assert usable.value.message == built.value.message


@override_settings(SECRET_KEY=NOW, SECRET_KEY_FALLBACKS=[SAVED_UNDER])
def test_a_key_under_a_fallback_opens_for_a_decision_which_rewrites_nothing(
    unreadable_stripe, site
):
    """Building the rail re-encrypts such a key under SECRET_KEY (a write); asking whether it
    opens, as a decision does, must not."""
    before = bytes(unreadable_stripe.secret_encrypted)
    account = RailAccount.objects.get(pk=unreadable_stripe.pk)
    with CaptureQueriesContext(connection) as queries:
        assert key_unreadable(account) is None
    assert queries.captured_queries == []
    assert usable_rail_account(site_id=site.pk, rail="stripe").pk == account.pk
    assert bytes(RailAccount.objects.get(pk=account.pk).secret_encrypted) == before


def test_an_account_without_a_key_is_not_asked(site):
    mock = ensure_mock_rail(site)
    assert not mock.has_secret
    with CaptureQueriesContext(connection) as queries:
        assert mock.secret_opens() and key_unreadable(mock) is None
    assert queries.captured_queries == []
