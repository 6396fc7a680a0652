"""Settings → Rails, the Shopify card: connect a store, check the token's scopes, write-only."""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from sill.rails.models import RailAccount
from tests.rails.shopify_fixtures import WEBHOOK_SECRET
from tests.rails.shopify_stub import SHOP, TOKEN

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"


@pytest.fixture
def form(shopify, settings):
    settings.DEBUG = True  # the API address override (the loopback store) needs DEBUG
    return {"shop_domain": SHOP, "access_token": TOKEN, "webhook_secrets": WEBHOOK_SECRET,
            "api_base": shopify.url}  # fmt: skip


def _account(site) -> RailAccount | None:
    return RailAccount.objects.filter(site=site, rail="shopify").first()


def test_it_connects_a_store_write_only_and_switches_it_on(client_for, site, form):
    client = client_for("owner")
    response = client.post(f"{URL}shopify/", form)
    assert response.status_code == 303
    account = _account(site)
    assert account.connected_account == SHOP and account.get_secret() == TOKEN
    assert account.get_webhook_secrets() == [WEBHOOK_SECRET] and not account.enabled
    assert TOKEN.encode() not in bytes(account.secret_encrypted)
    assert account.config["scopes"] == ["read_customers", "read_orders", "write_orders"]
    assert AuditRecord.objects.filter(site=site, kind="rail_change").count() == 1
    page = client.get(URL).content.decode()
    assert TOKEN not in page and WEBHOOK_SECRET not in page
    assert "shpat_…" + TOKEN[-4:] in page and "are granted" in page
    assert f"/webhooks/shopify/{site.pk}" in page
    assert client.post(f"{URL}shopify/enabled/", {"enabled": "1"}).status_code == 303
    assert _account(site).enabled


def test_it_says_which_scopes_the_token_lacks(client_for, site, form, shopify):
    shopify.scopes = ["read_orders"]
    response = client_for("admin").post(f"{URL}shopify/", form, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert "lacks write_orders, read_customers" in body
    assert "<code>write_orders</code>: without it, refunds on Shopify fail" in body
    assert "customer age and 90-day history are unknown" in body
    assert TOKEN not in body


@pytest.mark.parametrize(
    ("field", "value"),
    [("shop_domain", "northwind.example.com"), ("shop_domain", "x.myshopify.com.evil.example"),
     ("access_token", "shpss_notatoken0123456789"), ("access_token", "sk_test_123")],
)  # fmt: skip
def test_bad_input_is_422_and_saves_nothing(client_for, site, form, field, value):
    response = client_for("owner").post(f"{URL}shopify/", {**form, field: value})
    assert response.status_code == 422 and _account(site) is None
    assert 'aria-invalid="true"' in response.content.decode()


def test_a_token_shopify_refuses_saves_nothing(client_for, site, form, shopify):
    shopify.token = "shpat_somethingelse0123456789abcdef"
    response = client_for("owner").post(f"{URL}shopify/", form)
    assert response.status_code == 422 and _account(site) is None
    assert "Shopify refused this access token" in response.content.decode()


def test_changing_the_store_needs_its_token(client_for, site, form):
    client = client_for("owner")
    client.post(f"{URL}shopify/", form)
    response = client.post(
        f"{URL}shopify/", {**form, "shop_domain": "other.myshopify.com", "access_token": ""}
    )
    assert response.status_code == 422 and _account(site).connected_account == SHOP
    assert client.post(f"{URL}shopify/", {**form, "access_token": ""}).status_code == 303


@pytest.mark.parametrize("persona", ["reviewer", "staff"])
def test_other_roles_cannot_connect_a_store(client_for, site, form, persona):
    assert client_for(persona).post(f"{URL}shopify/", form).status_code == 403
    assert client_for("anonymous").post(f"{URL}shopify/", form).status_code == 302
    assert _account(site) is None


def test_an_outsider_connects_only_their_own_site(client_for, site, other_site, form):
    assert client_for("outsider").post(f"{URL}shopify/", form).status_code == 303
    assert _account(site) is None and _account(other_site) is not None


def test_the_page_keeps_its_query_count(client_for, site, form, django_assert_max_num_queries):
    client = client_for("owner")
    client.post(f"{URL}shopify/", form)
    with django_assert_max_num_queries(12):
        assert client.get(URL).status_code == 200
