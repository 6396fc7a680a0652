"""Settings → Rails, the WooCommerce card: connect a store (its keys checked with one read of
the loopback store, tests/rails/woo_stub.py), write-only secrets, and no switching it on
without the site's Stripe rail."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from audit.models import AuditRecord
from sill.rails.models import RailAccount
from tests.rails.woo_fixtures import WEBHOOK_SECRET
from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"
STRIPE_KEY = "sk_test_51AbCdEfGhIjKlMnOpQrStUvWxYz0123456789secretXYZ9"
OTHER_KEY = "ck_" + "a" * 40


@pytest.fixture
def form(woo):
    return {"store_url": woo.url, "consumer_key": CONSUMER_KEY,
            "consumer_secret": CONSUMER_SECRET, "webhook_secret": WEBHOOK_SECRET}  # fmt: skip


def _account(site) -> RailAccount | None:
    return RailAccount.objects.filter(site=site, rail="woocommerce").first()


def _stripe(site, *, enabled: bool = True) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", enabled=enabled, connected_account="acct_1Nw")
    account.set_secret(STRIPE_KEY)
    account.save()
    return account


def _rail_changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="rail_change").order_by("seq")
    return [json.loads(r.payload)["body"] for r in records]


def test_it_connects_a_store_write_only_after_one_read(client_for, site, form, woo):
    client = client_for("owner")
    response = client.post(f"{URL}woocommerce/", form)
    assert response.status_code == 303
    account = _account(site)
    assert account.connected_account == woo.url and not account.enabled
    assert json.loads(account.get_secret()) == {
        "consumer_key": CONSUMER_KEY,
        "consumer_secret": CONSUMER_SECRET,
    }
    assert account.get_webhook_secrets() == [WEBHOOK_SECRET]
    assert CONSUMER_SECRET.encode() not in bytes(account.secret_encrypted)
    assert woo.auth_seen == ["oauth1"] and woo.refund_posts == []  # one signed read, no write
    [change] = _rail_changes(site)
    assert change["rail"] == "woocommerce" and change["action"] == "connect"
    assert change["new_key"] and change["webhook_secrets_count"] == 1
    payloads = "".join(AuditRecord.objects.values_list("payload", flat=True))
    assert CONSUMER_SECRET not in payloads and WEBHOOK_SECRET not in payloads
    assert CONSUMER_KEY not in payloads

    page = client.get(URL).content.decode()
    for secret in (CONSUMER_KEY, CONSUMER_SECRET, WEBHOOK_SECRET):
        assert secret not in page
    assert "ck_…" + CONSUMER_KEY[-4:] in page and f"/webhooks/woocommerce/{site.pk}" in page
    assert "Stripe not connected" in page

    # Empty keys keep the stored ones (checked again with them).
    assert client.post(f"{URL}woocommerce/", {"store_url": woo.url}).status_code == 303
    assert json.loads(_account(site).get_secret())["consumer_key"] == CONSUMER_KEY
    assert len(woo.auth_seen) == 2 and _rail_changes(site)[-1]["action"] == "update"


def test_it_is_not_switched_on_without_stripe_and_says_so(client_for, site, form):
    client = client_for("admin")
    client.post(f"{URL}woocommerce/", form)
    response = client.post(f"{URL}woocommerce/enabled/", {"enabled": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    body = response.content.decode()
    assert "Connect Stripe first" in body and "payments are Stripe charges" in body
    assert not _account(site).enabled

    _stripe(site, enabled=False)
    response = client.post(f"{URL}woocommerce/enabled/", {"enabled": "1"})
    assert response.status_code == 422 and not _account(site).enabled
    assert "Stripe off" in response.content.decode()

    RailAccount.objects.filter(site=site, rail="stripe").update(enabled=True)
    page = client.get(URL).content.decode()
    assert "Stripe on" in page and "acct_1Nw" in page and "sk_test_…XYZ9" in page
    assert client.post(f"{URL}woocommerce/enabled/", {"enabled": "1"}).status_code == 303
    assert _account(site).enabled


def test_keys_the_store_refuses_save_nothing(client_for, site, form):
    response = client_for("owner").post(f"{URL}woocommerce/", {**form, "consumer_key": OTHER_KEY})
    assert response.status_code == 422
    body = response.content.decode()
    assert "The store refused these keys (woocommerce_rest_cannot_view)" in body
    assert "Nothing was saved" in body and 'aria-invalid="true"' in body
    assert CONSUMER_SECRET not in body and OTHER_KEY not in body
    assert _account(site) is None and _rail_changes(site) == []


def test_a_store_sill_cannot_reach_saves_nothing(client_for, site, form):
    response = client_for("owner").post(
        f"{URL}woocommerce/", {**form, "store_url": "http://127.0.0.1:9"}
    )
    assert response.status_code == 422
    assert "could not reach" in response.content.decode() and _account(site) is None


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("store_url", "http://shop.example.com", "https address"),
     ("store_url", "https://shop.example.com/?x=1", "without ?"),
     ("consumer_key", "ck_short", "ck_ and 40 hex"),
     ("consumer_secret", "", "both the consumer key and the consumer secret"),
     ("consumer_secret", "cs_nothex" + "z" * 34, "cs_ and 40 hex")],
)  # fmt: skip
def test_bad_input_is_422_and_saves_nothing(client_for, site, form, woo, field, value, words):
    for extra in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client_for("owner").post(f"{URL}woocommerce/", {**form, field: value}, **extra)
        assert response.status_code == 422
        body = response.content.decode()
        assert words in body and 'aria-invalid="true"' in body
        assert ("<html" in body) is (not extra)
    assert _account(site) is None and woo.auth_seen == []


def test_a_new_store_address_needs_its_keys(client_for, site, form, woo):
    client = client_for("owner")
    client.post(f"{URL}woocommerce/", form)
    response = client.post(f"{URL}woocommerce/", {"store_url": "https://other.example.com"})
    assert response.status_code == 422 and _account(site).connected_account == woo.url
    assert "the saved ones belong to" in response.content.decode()


@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_other_roles_change_nothing(client_for, site, form, woo, persona, expected):
    client = client_for(persona)
    assert client.post(f"{URL}woocommerce/", form).status_code == expected
    assert client.post(f"{URL}woocommerce/enabled/", {"enabled": "1"}).status_code == expected
    assert _account(site) is None and woo.auth_seen == []


def test_an_outsider_connects_only_their_own_site(client_for, site, other_site, form):
    assert client_for("outsider").post(f"{URL}woocommerce/", form).status_code == 303
    assert _account(site) is None and _account(other_site) is not None


def test_posts_need_a_csrf_token(members, site, form, woo):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.post(f"{URL}woocommerce/", form).status_code == 403
    assert client.post(f"{URL}woocommerce/enabled/", {"enabled": "1"}).status_code == 403
    assert _account(site) is None and woo.auth_seen == []
