"""Settings → Rails: who may open it, switching rails, and the write-only Stripe key."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from sill.rails.models import RailAccount
from sill.rails.registry import ensure_mock_rail

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"
TEST_KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretXYZ9"
LIVE_KEY = "sk_live_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretLIV3"
HX = {"HTTP_HX_REQUEST": "true"}


def _stripe(site) -> RailAccount | None:
    return RailAccount.objects.filter(site=site, rail="stripe").first()


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 403), ("staff", 403), ("anonymous", 302)],
)
def test_it_lets_only_owners_and_admins_open_the_page(client_for, persona, expected):
    response = client_for(persona).get(URL)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/")
    if expected == 200:
        body = response.content.decode()
        for label in ("Mock", "Stripe", "Shopify", "WooCommerce", "PayPal"):
            assert label in body
        # Every rail has its card now: nothing is listed as "not available yet".
        assert body.count(">Not available yet</span>") == 0


@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_it_refuses_every_action_to_other_roles(client_for, site, persona, expected):
    client = client_for(persona)
    data = {"secret_key": TEST_KEY, "mode": "test", "connected_account": ""}
    assert client.post(f"{URL}stripe/", data).status_code == expected
    assert client.post(f"{URL}mock/enabled/", {"enabled": "1"}).status_code == expected
    assert not RailAccount.objects.filter(site=site).exists()


def test_an_outsider_changes_only_their_own_site(client_for, site, other_site):
    ensure_mock_rail(site)
    response = client_for("outsider").post(f"{URL}mock/enabled/", {"enabled": "0"})
    assert response.status_code == 303
    assert RailAccount.objects.get(site=site, rail="mock").enabled
    assert not RailAccount.objects.get(site=other_site, rail="mock").enabled


def test_an_unknown_or_unconnected_rail_is_refused(client_for, site):
    client = client_for("owner")
    assert client.post(f"{URL}bitcoin/enabled/", {"enabled": "1"}).status_code == 404
    response = client.post(f"{URL}paypal/enabled/", {"enabled": "1"})
    assert response.status_code == 422
    assert "client id and secret before switching the PayPal rail on" in response.content.decode()
    assert not RailAccount.objects.filter(site=site).exists()


def test_get_on_an_action_is_not_allowed(client_for):
    assert client_for("owner").get(f"{URL}stripe/").status_code == 405


def test_it_switches_the_mock_rail_off_and_on(client_for, site):
    ensure_mock_rail(site)
    client = client_for("admin")
    response = client.post(f"{URL}mock/enabled/", {"enabled": "0"})
    assert response.status_code == 303 and response["Location"] == URL
    assert not RailAccount.objects.get(site=site, rail="mock").enabled
    page = client.get(URL).content.decode()
    # The refusal in the words the Refunds list shows it with, not its API code.
    assert "The Mock rail is off" in page and "The rail is off or not connected" in page
    assert "rail_disabled" not in page
    # htmx swaps only the card.
    response = client.post(f"{URL}mock/enabled/", {"enabled": "1"}, **HX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<article class="rail-card') and "The Mock rail is on" in body
    assert RailAccount.objects.get(site=site, rail="mock").enabled


def test_it_saves_a_stripe_key_write_only(client_for, site, caplog):
    caplog.set_level(logging.DEBUG)
    client = client_for("owner")
    data = {"secret_key": TEST_KEY, "mode": "test", "connected_account": "acct_1Abc"}
    response = client.post(f"{URL}stripe/", data, follow=True)
    account = _stripe(site)
    assert account.get_secret() == TEST_KEY
    assert (account.mode, account.connected_account, account.enabled) == (
        "test",
        "acct_1Abc",
        False,
    )
    body = response.content.decode()
    assert "Key saved" in body and "sk_test_…XYZ9" in body and "switch it on" in body
    assert TEST_KEY not in body and "secretXYZ9" not in body
    # Later pages never show it either, and nothing logged it.
    assert TEST_KEY not in client.get(URL).content.decode()
    assert TEST_KEY not in caplog.text and "secretXYZ9" not in caplog.text
    assert "stripe rail configured" in caplog.text

    # An empty key keeps the stored one; then the rail can be switched on.
    response = client.post(f"{URL}stripe/", {"secret_key": "", "mode": "test"})
    assert response.status_code == 303
    assert _stripe(site).get_secret() == TEST_KEY and _stripe(site).connected_account == ""
    client.post(f"{URL}stripe/enabled/", {"enabled": "1"})
    assert _stripe(site).enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"secret_key": "pk_test_abcdefghijkl", "mode": "test"}, "not a Stripe secret key"),
        ({"secret_key": "sk_test_abc def ghijkl", "mode": "test"}, "unexpected characters"),
        ({"secret_key": "", "mode": "test"}, "Enter the Stripe secret key"),
        ({"secret_key": LIVE_KEY, "mode": "test"}, "a live key needs live mode"),
        ({"secret_key": TEST_KEY, "mode": "live"}, "SILL_ALLOW_LIVE"),
        ({"secret_key": TEST_KEY, "mode": "bogus"}, "Select a valid choice"),
        (
            {"secret_key": TEST_KEY, "mode": "test", "connected_account": "nope"},
            "connected account id",
        ),
    ],
)
def test_bad_stripe_input_is_a_422_that_writes_nothing(client_for, site, caplog, data, message):
    caplog.set_level(logging.DEBUG)
    client = client_for("owner")
    for extra in ({}, HX):
        response = client.post(f"{URL}stripe/", data, **extra)
        assert response.status_code == 422
        body = response.content.decode()
        assert message in body.replace("&#x27;", "'")
        assert 'aria-invalid="true"' in body
        # Full page without htmx, only the card with it.
        assert ("<html" in body) is (not extra)
        assert data["secret_key"] == "" or data["secret_key"] not in body
    assert _stripe(site) is None
    assert TEST_KEY not in caplog.text and LIVE_KEY not in caplog.text


def test_live_mode_is_accepted_when_the_deployment_allows_it(client_for, site, settings):
    settings.SILL_ALLOW_LIVE = True
    client = client_for("owner")
    response = client.post(f"{URL}stripe/", {"secret_key": LIVE_KEY, "mode": "live"})
    assert response.status_code == 303
    assert _stripe(site).mode == "live"
    # Switching back to test mode while a live key is stored is refused.
    response = client.post(f"{URL}stripe/", {"secret_key": "", "mode": "test"})
    assert response.status_code == 422 and _stripe(site).mode == "live"


def test_stripe_cannot_be_switched_on_without_a_key(client_for, site):
    response = client_for("owner").post(f"{URL}stripe/enabled/", {"enabled": "1"})
    assert response.status_code == 422
    assert "Save a Stripe secret key" in response.content.decode()
    assert _stripe(site) is None


def test_the_api_base_override_exists_only_under_debug(client_for, site, settings):
    client = client_for("owner")
    data = {"secret_key": TEST_KEY, "mode": "test", "api_base": "http://127.0.0.1:8420"}
    assert 'name="api_base"' not in client.get(URL).content.decode()
    client.post(f"{URL}stripe/", data)
    assert _stripe(site).api_base == ""  # ignored without DEBUG
    settings.DEBUG = True
    assert 'name="api_base"' in client.get(URL).content.decode()
    client.post(f"{URL}stripe/", data)
    assert _stripe(site).api_base == "http://127.0.0.1:8420"
    response = client.post(f"{URL}stripe/", {**data, "api_base": "ftp://x"})
    assert response.status_code == 422 and _stripe(site).api_base == "http://127.0.0.1:8420"


def test_posts_need_a_csrf_token(members, site):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    response = client.post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})
    assert response.status_code == 403
    assert client.post(f"{URL}mock/enabled/", {"enabled": "1"}).status_code == 403
    assert not RailAccount.objects.filter(site=site).exists()


def test_an_unreadable_key_asks_to_enter_it_again(client_for, site, settings):
    client_for("owner").post(f"{URL}stripe/", {"secret_key": TEST_KEY, "mode": "test"})
    settings.SECRET_KEY = "rotated-" + "y" * 50
    body = client_for("owner").get(URL).content.decode()
    assert "Key unreadable" in body and TEST_KEY not in body
