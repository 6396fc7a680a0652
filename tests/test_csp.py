"""Every kind of answer carries the Content-Security-Policy (no 'unsafe-inline', no eval) and
the Permissions-Policy: pages, htmx partials, redirects, errors, the API, the lockout page and
the Django admin."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.admin_mount import admin_mounted
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

POLICY = {
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "object-src 'none'",
}


def _assert_headers(response) -> None:
    assert set(response["Content-Security-Policy"].split("; ")) == POLICY, response.status_code
    assert "unsafe" not in response["Content-Security-Policy"]
    features = response["Permissions-Policy"].split(", ")
    for off in ("camera=()", "microphone=()", "geolocation=()", "payment=()", "usb=()"):
        assert off in features


@pytest.fixture
def held(make_order, agent):
    return hold_refund(order=make_order(placed_by_agent=agent), agent=agent)


OWNER_PAGES = [
    "/",
    "/orders/",
    "/orders/?q=buyer&status=PAID",
    "/held/",
    "/rules/",
    "/rules/templates/",
    "/activity/",
    "/reconcile/",
    "/settings/",
    "/settings/reasons/",
    "/settings/rails/",
    "/settings/agents/",
    "/settings/members/",
]


@pytest.mark.parametrize("path", OWNER_PAGES)
def test_every_page_carries_the_policy(client_for, path):
    response = client_for("owner").get(path)
    assert response.status_code == 200
    _assert_headers(response)


def test_object_pages_and_their_htmx_partials_carry_it(client_for, held):
    owner = client_for("owner")
    order = held.order
    for path in (
        f"/orders/{order.id}/",
        f"/orders/{order.id}/?tab=transactions",
        f"/held/{held.id}/",
    ):
        _assert_headers(owner.get(path))
    partial = owner.get(
        f"/orders/{order.id}/?tab=transactions",
        headers={"HX-Request": "true", "HX-Target": "order-tab"},
    )
    assert partial.status_code == 200 and b"<html" not in partial.content
    _assert_headers(partial)


def test_anonymous_pages_redirects_and_errors_carry_it(db):
    client = Client()
    _assert_headers(client.get("/login/"))
    redirect = client.get("/orders/")
    assert redirect.status_code == 302
    _assert_headers(redirect)
    _assert_headers(client.get("/no-such-page/"))
    _assert_headers(client.get("/.well-known/sill-audit-keys.json"))


def test_the_api_carries_it(db):
    response = Client().post("/api/v1/mandates", data=b"{", content_type="application/json")
    assert response.status_code == 400
    _assert_headers(response)


def test_the_lockout_page_carries_it(members):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(10):
        response = attacker.post("/login/", {"username": "owner@roasters.example", "password": "x"})
    assert response.status_code == 429
    _assert_headers(response)


def test_the_django_admin_carries_it(admin_client):
    with admin_mounted():
        response = admin_client.get("/django-admin/")
        assert response.status_code == 200
        _assert_headers(response)


def test_the_base_layout_switches_off_what_htmx_would_inline(client_for):
    body = client_for("owner").get("/").content.decode()
    assert (
        '<meta name="htmx-config" content=\'{"includeIndicatorStyles": false, '
        '"allowEval": false, "allowScriptTags": false}\'>'
    ) in body
