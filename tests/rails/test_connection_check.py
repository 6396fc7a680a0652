"""Settings → Rails' "Test connection": each rail's cheap read against its stand-in (localstripe,
the Shopify, WooCommerce and PayPal loopback stubs), the answer in words on the card, never a
secret, owners and admins only, and a repeat within seconds answered without a second call."""

from __future__ import annotations

import json
import logging
import socket
import uuid

import pytest
from django.core.cache import cache
from django.test import Client

from sill.rails.connection import debounce_key
from sill.rails.models import RailAccount
from sill.rails.paypal.client import PayPalClient
from sill.rails.registry import ensure_mock_rail
from tests.rails.localstripe_fixtures import KEY as STRIPE_KEY
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET
from tests.rails.shopify_stub import TOKEN as SHOPIFY_TOKEN
from tests.rails.stripe_events import stripe_account
from tests.rails.woo_stub import CONSUMER_SECRET

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def own_cache(settings):
    """The debounce cache of this test only."""
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


def check_url(rail: str) -> str:
    return f"/settings/rails/{rail}/test/"


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def check(client, rail: str, *, htmx: bool = True):
    response = client.post(check_url(rail), **(HX if htmx else {}))
    return response, response.content.decode()


# --- each rail ---------------------------------------------------------------------------------


def test_the_mock_rail_answers_at_once(client_for, site):
    ensure_mock_rail(site)
    response, body = check(client_for("owner"), "mock")
    assert response.status_code == 200
    assert body.lstrip().startswith('<article class="rail-card')  # the card alone, for htmx
    assert "Connected to Sill&#x27;s mock rail (no money moves) · test mode" in body


def test_stripe_against_localstripe(client_for, site, localstripe_url, caplog):
    stripe_account(site, enabled=True, api_base=localstripe_url)
    with caplog.at_level(logging.DEBUG):
        response, body = check(client_for("admin"), "stripe")
    assert response.status_code == 200
    assert 'class="badge badge-ok">OK</span> Connected to Stripe · test mode' in body
    assert STRIPE_KEY not in body and STRIPE_KEY not in caplog.text


def test_stripe_with_a_key_stripe_refuses(client_for, site, localstripe_url):
    account = stripe_account(site, enabled=True, api_base=localstripe_url)
    account.set_secret("rk_test_not_a_key_localstripe_takes")  # localstripe takes sk_ only
    account.save()
    response, body = check(client_for("owner"), "stripe")
    assert response.status_code == 200
    assert "Failed</span> Stripe refused the API key: it is mistyped, rolled or deleted." in body
    assert "rk_test_not_a_key" not in body


def test_stripe_unreachable_says_so_quickly(client_for, site, settings):
    settings.SILL_RAIL_CHECK_TIMEOUT_SECONDS = 1
    stripe_account(site, enabled=True, api_base=closed_port())
    _, body = check(client_for("owner"), "stripe")
    assert "Stripe could not be reached (no answer in time)." in body


def test_shopify_names_the_shop_and_a_missing_scope(client_for, shopify, shopify_account):
    _, body = check(client_for("owner"), "shopify")
    assert "Connected to Sill Dev Store · development store" in body
    assert "Missing scope" not in body
    shopify.scopes = ["read_orders", "read_customers"]
    cache.delete(debounce_key(shopify_account))  # past the debounce
    _, body = check(client_for("owner"), "shopify")
    assert "Connected to Sill Dev Store · development store" in body
    assert "Missing scope: write_orders." in body
    assert SHOPIFY_TOKEN not in body


def test_shopify_with_a_revoked_token(client_for, shopify, shopify_account):
    shopify.token = "shpat_" + "0" * 32
    _, body = check(client_for("owner"), "shopify")
    assert "Failed</span> Shopify refused the access token for sill-dev.myshopify.com" in body


def test_woocommerce_reads_one_order(client_for, woo, woo_account):
    _, body = check(client_for("owner"), "woocommerce")
    assert "Connected to 127.0.0.1:" in body
    assert CONSUMER_SECRET not in body


def test_woocommerce_with_wrong_keys(client_for, woo, woo_account):
    woo_account.set_secret(json.dumps({"consumer_key": "ck_wrong", "consumer_secret": "cs_wrong"}))
    woo_account.save()
    _, body = check(client_for("owner"), "woocommerce")
    assert "Failed</span> The store refused these keys (woocommerce_rest_cannot_view)" in body


def test_paypal_asks_for_a_fresh_token(client_for, paypal, paypal_account):
    PayPalClient(
        client_id=CLIENT_ID, client_secret=CLIENT_SECRET, api_base=paypal.url
    ).sign_in()  # a token in the cache: the check must not settle for it
    assert paypal.token_requests == 1
    _, body = check(client_for("owner"), "paypal")
    assert paypal.token_requests == 2
    assert "Connected to APP-80W284485P519543T · test mode" in body
    assert CLIENT_SECRET not in body


@pytest.mark.parametrize(
    "app_id", [{"id": "APP-1"}, 5, "APP-" + "9" * 5000], ids=["an-object", "a-number", "absurd"]
)
def test_paypal_naming_its_app_oddly_is_named_by_the_client_id(
    client_for, paypal, paypal_account, app_id
):
    # Seen before: the card said "Connected to {'id': 'APP-1'}", "5", or 5,000 characters.
    paypal.reshape("/v1/oauth2/token", lambda answer: {**answer, "app_id": app_id})
    _, body = check(client_for("owner"), "paypal")
    assert f"Connected to REST app {CLIENT_ID[:8]}… · test mode" in body
    assert "APP-1" not in body and "9" * 100 not in body


def test_paypal_with_a_wrong_secret(client_for, paypal, paypal_account):
    paypal_account.set_secret("wrong-secret")
    paypal_account.save()
    _, body = check(client_for("owner"), "paypal")
    assert "Failed</span> PayPal&#x27;s sandbox refused the client id and secret" in body


# --- the card, the debounce, access ------------------------------------------------------------


def test_only_rails_with_credentials_offer_the_button(client_for, site, localstripe_url):
    ensure_mock_rail(site)
    body = client_for("owner").get("/settings/rails/").content.decode()
    assert body.count(">Test connection</button>") == 1  # the mock rail only
    stripe_account(site, enabled=False, api_base=localstripe_url)
    body = client_for("owner").get("/settings/rails/").content.decode()
    assert body.count(">Test connection</button>") == 2


def test_a_rail_without_credentials_is_refused_in_words(client_for, site):
    response, body = check(client_for("owner"), "paypal")
    assert response.status_code == 422
    assert "There is nothing to test yet: save PayPal credentials first." in body
    assert client_for("owner").post(check_url("bitcoin")).status_code == 404


def test_a_repeat_within_seconds_does_not_call_the_provider_again(
    client_for, paypal, paypal_account
):
    client = client_for("owner")
    check(client, "paypal")
    assert paypal.token_requests == 1
    _, body = check(client, "paypal")
    assert "Connected to APP-80W284485P519543T" in body  # the same answer, from seconds ago
    assert paypal.token_requests == 1


def test_new_credentials_are_checked_at_once_not_answered_from_the_debounce(
    client_for, site, localstripe_url
):
    # Seen: a wrong key tested, the right one saved, tested again at once: the card still
    # said the key was refused, the answer of seconds before.
    account = stripe_account(site, enabled=True, api_base=localstripe_url)
    account.set_secret("rk_test_not_a_key_localstripe_takes")
    account.save()
    client = client_for("owner")
    _, body = check(client, "stripe")
    assert "Stripe refused the API key" in body
    right = "sk_test_SillConnectionCheck0002"
    saved = client.post("/settings/rails/stripe/", {"secret_key": right, "mode": "test"})
    assert saved.status_code == 303
    assert RailAccount.objects.get(pk=account.pk).get_secret() == right
    _, body = check(client, "stripe")
    assert "Connected to Stripe · test mode" in body
    assert "Stripe refused the API key" not in body
    # Unchanged credentials are still answered from the debounce, under the new ones' key.
    assert cache.get(debounce_key(RailAccount.objects.get(pk=account.pk))).ok


def test_without_htmx_the_whole_page_shows_the_answer(client_for, site):
    ensure_mock_rail(site)
    response, body = check(client_for("owner"), "mock", htmx=False)
    assert response.status_code == 200 and "<html" in body
    assert "Connected to Sill&#x27;s mock rail" in body


@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_only_owners_and_admins_test_a_connection(client_for, site, persona, expected):
    ensure_mock_rail(site)
    assert client_for(persona).post(check_url("mock")).status_code == expected


def test_another_sites_owner_tests_only_their_own_rail(client_for, site, localstripe_url):
    stripe_account(site, enabled=True, api_base=localstripe_url)
    response, body = check(client_for("outsider"), "stripe")
    # The outsider's own site has no Stripe credentials: nothing of this site is used.
    assert response.status_code == 422 and "nothing to test yet" in body
    assert RailAccount.objects.filter(rail="stripe").count() == 1


def test_it_needs_post_and_csrf(members, site):
    ensure_mock_rail(site)
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.get(check_url("mock")).status_code == 405
    assert client.post(check_url("mock")).status_code == 403


def test_webhook_addresses_use_the_base_url_not_the_host_header(client_for, site, settings):
    settings.SILL_BASE_URL = "https://sill.roasters.example/"
    settings.ALLOWED_HOSTS = ["*"]
    body = client_for("owner").get("/settings/rails/", HTTP_HOST="evil.example").content.decode()
    assert f"https://sill.roasters.example/webhooks/stripe/{site.pk}" in body
    assert "evil.example" not in body
