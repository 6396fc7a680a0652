"""Settings → Rails, the PayPal card: client id and write-only secret checked by fetching a
token from the loopback PayPal (tests/rails/paypal_stub.py), sandbox unless SILL_ALLOW_LIVE,
and the webhook id that verifies deliveries."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client

from audit.models import AuditRecord
from sill.rails.models import RailAccount
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET, WEBHOOK_ID

pytestmark = pytest.mark.django_db
URL = "/settings/rails/"
WRONG_SECRET = "EFgHiJkLmNoPqRsTuVwXyZ0123456789notthesecret"


@pytest.fixture
def form(paypal, settings):
    settings.DEBUG = True  # the API address override (the loopback PayPal) needs DEBUG
    return {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "mode": "test",
            "webhook_id": WEBHOOK_ID, "api_base": paypal.url}  # fmt: skip


def _account(site) -> RailAccount | None:
    return RailAccount.objects.filter(site=site, rail="paypal").first()


def _rail_changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="rail_change").order_by("seq")
    return [json.loads(r.payload)["body"] for r in records]


def test_it_connects_paypal_write_only_after_paypal_gave_a_token(
    client_for, site, form, paypal, caplog
):
    caplog.set_level(logging.DEBUG)
    client = client_for("owner")
    response = client.post(f"{URL}paypal/", form, follow=True)
    assert response.status_code == 200
    assert "PayPal accepted the credentials (sandbox)" in response.content.decode()
    assert paypal.token_requests == 1
    account = _account(site)
    assert account.get_secret() == CLIENT_SECRET and account.mode == "test"
    assert account.config == {"client_id": CLIENT_ID, "webhook_id": WEBHOOK_ID}
    assert account.api_base == paypal.url and not account.enabled
    assert CLIENT_SECRET.encode() not in bytes(account.secret_encrypted)
    [change] = _rail_changes(site)
    assert (change["rail"], change["action"], change["mode"], change["new_key"]) == (
        "paypal",
        "connect",
        "test",
        True,
    )
    assert change["webhook_id_changed"] and change["actor"] == "owner@roasters.example"
    payloads = "".join(AuditRecord.objects.values_list("payload", flat=True))
    assert CLIENT_SECRET not in payloads and CLIENT_SECRET not in caplog.text

    page = client.get(URL).content.decode()
    assert CLIENT_SECRET not in page
    assert "…" + CLIENT_SECRET[-4:] in page and "Sandbox mode" in page
    assert f"/webhooks/paypal/{site.pk}" in page and WEBHOOK_ID in page
    assert client.post(f"{URL}paypal/enabled/", {"enabled": "1"}).status_code == 303
    assert _account(site).enabled

    # An empty secret keeps the stored one; the rail works with what was saved.
    response = client.post(f"{URL}paypal/", {**form, "client_secret": "", "webhook_id": ""})
    assert response.status_code == 303
    assert _account(site).get_secret() == CLIENT_SECRET
    assert _account(site).config["webhook_id"] == ""


def test_credentials_paypal_refuses_save_nothing(client_for, site, form, paypal):
    response = client_for("owner").post(f"{URL}paypal/", {**form, "client_secret": WRONG_SECRET})
    assert response.status_code == 422
    body = response.content.decode()
    assert "PayPal&#x27;s sandbox refused this client id and secret" in body
    assert "Nothing was saved" in body and WRONG_SECRET not in body
    assert _account(site) is None and _rail_changes(site) == []


def test_a_paypal_sill_cannot_reach_saves_nothing(client_for, site, form):
    response = client_for("owner").post(
        f"{URL}paypal/", {**form, "api_base": "http://127.0.0.1:9"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 422
    assert "could not reach" in response.content.decode() and _account(site) is None


def test_live_mode_needs_sill_allow_live(client_for, site, form, settings):
    client = client_for("owner")
    response = client.post(f"{URL}paypal/", {**form, "mode": "live"})
    assert response.status_code == 422 and _account(site) is None
    assert "SILL_ALLOW_LIVE=1" in response.content.decode()
    settings.SILL_ALLOW_LIVE = True
    assert client.post(f"{URL}paypal/", {**form, "mode": "live"}).status_code == 303
    assert _account(site).mode == "live"
    assert "Live mode" in client.get(URL).content.decode()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [("client_id", "", "This field is required"),
     ("client_id", "short", "client id"),
     ("client_secret", "has spaces in it 0123456789", "unexpected characters"),
     ("client_secret", "", "Enter the client secret"),
     ("webhook_id", "wh-lower-case", "webhook id looks like"),
     ("mode", "bogus", "Select a valid choice"),
     ("api_base", "ftp://x", "http(s) address")],
)  # fmt: skip
def test_bad_input_is_422_and_saves_nothing(client_for, site, form, paypal, field, value, words):
    response = client_for("owner").post(f"{URL}paypal/", {**form, field: value})
    assert response.status_code == 422
    body = response.content.decode()
    assert words in body and 'aria-invalid="true"' in body
    assert _account(site) is None and paypal.token_requests == 0


@pytest.mark.parametrize(
    ("persona", "expected"), [("reviewer", 403), ("staff", 403), ("anonymous", 302)]
)
def test_other_roles_change_nothing(client_for, site, form, paypal, persona, expected):
    client = client_for(persona)
    assert client.post(f"{URL}paypal/", form).status_code == expected
    assert client.post(f"{URL}paypal/enabled/", {"enabled": "1"}).status_code == expected
    assert _account(site) is None and paypal.token_requests == 0


def test_an_outsider_connects_only_their_own_site(client_for, site, other_site, form):
    assert client_for("outsider").post(f"{URL}paypal/", form).status_code == 303
    assert _account(site) is None and _account(other_site) is not None


def test_posts_need_a_csrf_token(members, site, form, paypal):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.post(f"{URL}paypal/", form).status_code == 403
    assert client.post(f"{URL}paypal/enabled/", {"enabled": "1"}).status_code == 403
    assert _account(site) is None and paypal.token_requests == 0


def test_the_page_runs_a_bounded_number_of_queries(
    client_for, site, form, django_assert_max_num_queries
):
    client = client_for("owner")
    client.post(f"{URL}paypal/", form)
    with django_assert_max_num_queries(12):
        assert client.get(URL).status_code == 200
