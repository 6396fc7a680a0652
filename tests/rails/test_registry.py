"""Which rail a site gets, and when Sill refuses to build one."""

from __future__ import annotations

import pytest

from sill.rails.mock import MockRail
from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    ensure_mock_rail,
    rail_account_for,
    rail_for,
)
from sill.rails.stripe import StripeRail


def stripe_account(site, *, key: str, mode: str = "test") -> RailAccount:
    account = RailAccount(site=site, rail="stripe", mode=mode)
    account.set_secret(key)
    account.save()
    return account


def test_it_builds_the_mock_rail_with_its_script(site):
    account = ensure_mock_rail(site)
    account.config = {"refund": "decline"}
    account.save()

    rail = rail_for(site_id=site.pk, rail="mock")

    assert isinstance(rail, MockRail)
    assert rail.site_id == site.pk
    assert rail.config == {"refund": "decline"}


def test_ensure_mock_rail_is_idempotent_and_enables(site):
    first = ensure_mock_rail(site)
    RailAccount.objects.filter(pk=first.pk).update(enabled=False)

    again = ensure_mock_rail(site)

    assert again.pk == first.pk
    assert again.enabled
    assert RailAccount.objects.filter(site=site).count() == 1


def test_it_refuses_a_disabled_rail(site):
    account = ensure_mock_rail(site)
    account.enabled = False
    account.save()

    with pytest.raises(RailDisabled) as caught:
        rail_for(site_id=site.pk, rail="mock")

    assert caught.value.code == "rail_disabled"


def test_it_refuses_a_rail_the_site_never_set_up(site):
    with pytest.raises(RailDisabled, match="Stripe"):
        rail_account_for(site_id=site.pk, rail="stripe")


def test_it_refuses_another_sites_rail(site, other_site):
    ensure_mock_rail(other_site)

    with pytest.raises(RailDisabled):
        rail_for(site_id=site.pk, rail="mock")


def test_it_builds_stripe_from_the_encrypted_key(site):
    stripe_account(site, key="sk_test_abc123")

    rail = rail_for(site_id=site.pk, rail="stripe")

    assert isinstance(rail, StripeRail)
    assert "sk_test_abc123" not in repr(rail)


def test_it_refuses_live_mode_without_allow_live(site, settings):
    settings.SILL_ALLOW_LIVE = False
    stripe_account(site, key="sk_live_abc123", mode="live")

    with pytest.raises(RailDisabled, match="SILL_ALLOW_LIVE"):
        rail_for(site_id=site.pk, rail="stripe")


def test_it_allows_live_mode_with_allow_live(site, settings):
    settings.SILL_ALLOW_LIVE = True
    stripe_account(site, key="sk_live_abc123", mode="live")

    assert isinstance(rail_for(site_id=site.pk, rail="stripe"), StripeRail)


@pytest.mark.parametrize(("key", "mode"), [("sk_live_abc", "test"), ("sk_test_abc", "live")])
def test_it_refuses_a_key_that_does_not_match_the_mode(site, settings, key, mode):
    settings.SILL_ALLOW_LIVE = True
    stripe_account(site, key=key, mode=mode)

    with pytest.raises(RailDisabled, match="does not match"):
        rail_for(site_id=site.pk, rail="stripe")


def test_it_refuses_stripe_without_a_key(site):
    RailAccount.objects.create(site=site, rail="stripe")

    with pytest.raises(RailDisabled, match="no API key"):
        rail_for(site_id=site.pk, rail="stripe")


def test_it_refuses_woocommerce_as_a_rail_because_its_refunds_run_on_stripe(site):
    RailAccount.objects.create(site=site, rail="woocommerce")

    with pytest.raises(RailDisabled, match="refunds of WooCommerce orders run on Stripe"):
        rail_for(site_id=site.pk, rail="woocommerce")
