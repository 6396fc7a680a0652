"""No page or endpoint answers 500 to bad input, and garbage POSTs write no refund.

Walks every URL pattern of the project as an owner (the role that may do most), filling
path parameters with ids of real objects, of another site's objects and of nonsense, and
sends garbage query strings and bodies.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from refunds.models import Refund
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db

GARBAGE_QUERY = {
    "q": "\x00'\"<script>",
    "status": "NOPE",
    "page": "-1",
    "kind": "x" * 300,
    "min": "abc",
    "max": "1e999",
    "reason": "[]",
    "agent": "%",
    "tab": "../../etc",
    "verify": "1",
}
GARBAGE_FORMS = [
    {},
    {"amount": "abc", "percentage": "1e9", "kind": "??", "reason": "x", "name": "", "parent": "zz"},
    {"amount": "-5", "kind": "amount", "reason": "999999", "role": "god", "email": "not-an-email",
     "cap": "NaN", "currency": "XXX", "mode": "live", "secret_key": "nope", "public_key": "!!"},
]  # fmt: skip


def _patterns(resolver: URLResolver, prefix: str = "") -> list[str]:
    out = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            out += _patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            out.append(prefix + str(entry.pattern))
    return out


def _fill(route: str, value: str) -> str:
    return "/" + re.sub(r"<(?:\w+:)?\w+>", value, route).lstrip("^").rstrip("$")


@pytest.fixture
def urls() -> list[str]:
    return [
        r for r in _patterns(get_resolver())
        if not r.startswith(("django-admin", "^static"))
    ]  # fmt: skip


@pytest.mark.parametrize("value", ["1", "nonsense", "rf_01M8MEPBA3Q253G7SC1HS94PTH", "0"])
def test_no_get_answers_500_to_bad_input(client_for, urls, make_order, value):
    make_order()
    client = client_for("owner")
    for route in urls:
        url = _fill(route, value)
        response = client.get(url, GARBAGE_QUERY)
        assert response.status_code < 500, (url, response.status_code)
        response = client.get(url, GARBAGE_QUERY, headers={"HX-Request": "true"})
        assert response.status_code < 500, (url, "htmx", response.status_code)


def test_no_post_answers_500_to_garbage_and_nothing_moves(
    client_for, members, urls, make_order, other_site, mock_rail
):
    mine = make_order()
    theirs = make_order(on_site=other_site)
    client = client_for("owner")
    for value in (mine.id, theirs.id, "1", "nonsense"):
        for route in urls:
            url = _fill(route, value)
            if url == "/logout/":
                continue
            client.force_login(members["owner"].user)  # a garbage POST may not log us out
            for form in GARBAGE_FORMS:
                response = client.post(url, form)
                assert response.status_code < 500, (url, form, response.status_code)
            for body in (
                b"{",
                b"[]",
                b'{"amount": {"x": 1}}',
                b'{"full": "yes", "reasonId": null}',
            ):
                response = client.post(url, data=body, content_type="application/json")
                assert response.status_code < 500, (url, body, response.status_code)
    assert Refund.objects.count() == 0
    assert MockLedgerEntry.objects.count() == 0


@pytest.fixture
def mock_rail(site):
    from sill.rails.registry import ensure_mock_rail

    return ensure_mock_rail(site)


def test_a_nul_in_a_path_argument_is_a_400_on_every_route(client_for, urls):
    # Seen: /audit/%00/checkpoint reached PostgreSQL ("text fields cannot contain NUL"): a 500.
    client = client_for("owner")
    for route in urls:
        if "<" not in route:
            continue
        url = _fill(route, "a\x00b")
        assert client.get(url).status_code == 400, url
        assert client.post(url).status_code == 400, url


def test_a_nul_in_a_query_or_form_is_a_400(client_for):
    client = client_for("owner")
    assert client.get("/orders/", {"q": "a\x00b"}).status_code == 400
    assert client.post("/settings/reasons/add/", {"name": "x\x00"}).status_code == 400
    response = client.get("/api/v1/policy-templates", {"x": "\x00"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed"


def test_a_nul_in_a_form_is_said_on_a_page_and_to_programs_in_the_error_shape(client_for):
    """Seen: a page's form got a bare text answer, which htmx then put in the form's place;
    a webhook or Slack got it too, where the other refusals are JSON."""
    client = client_for("owner")

    page = client.post("/settings/reasons/add/", {"name": "x\x00"})
    swapped = client.post(
        "/settings/reasons/add/", {"name": "x\x00"}, headers={"HX-Request": "true"}
    )

    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    body = page.content.decode()
    assert "<h1" in body and "NUL character" in body and "nothing was changed" in body
    assert "data-focus-when-swapped" in swapped.content.decode()  # in the form's place
    for path in ("/webhooks/stripe/s_1", "/slack/interactions/s_1"):
        answer = client.post(path, {"payload": "\x00"})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "malformed", path
    answer = client.get("/orders/", {"q": "\x00"}, headers={"Accept": "application/json"})
    assert answer.json()["error"]["code"] == "malformed"


def test_a_nul_inside_a_mandate_is_malformed(client_for):
    from django.test import Client

    body = b'{"signed": {"mandate_id": "mnd_\\u0000", "site_id": "s", "agent_id": "a"}, "envelope": {}}'
    response = Client().post("/api/v1/mandates", data=body, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed"


# --- bodies over Django's own limit ------------------------------------------------------------
# Django reads a form body (request.body, request.POST) only up to DATA_UPLOAD_MAX_MEMORY_SIZE
# and raises RequestDataTooBig past it (TooManyFieldsSent past 1000 fields). RefuseNulMiddleware
# reads every form POST, so any endpoint sent a large enough form answered Django's HTML
# "Bad Request (400)" page: the mandate API, the staff and rules APIs, every rail's webhook and
# Slack's interactions, whose clients read JSON.

MACHINE_URLS = [
    "/api/v1/mandates",
    "/api/order/{order}/refund",
    "/api/v1/sites/{site}/rules",
    "/webhooks/stripe/{site}",
    "/webhooks/shopify/{site}",
    "/webhooks/woocommerce/{site}",
    "/webhooks/paypal/{site}",
    "/slack/interactions/{site}",
]


def _written() -> tuple[int, ...]:
    from audit.models import AuditRecord
    from policies.models import PolicyVersion
    from sill.rails.models import WebhookEvent

    models = (Refund, PolicyVersion, WebhookEvent, AuditRecord, MockLedgerEntry)
    return tuple(model.objects.count() for model in models)


@pytest.mark.parametrize("route", MACHINE_URLS)
def test_a_form_over_djangos_limit_is_413_too_large_in_the_error_shape(
    client_for, site, make_order, settings, route
):
    url = route.format(site=site.pk, order=make_order().id)
    body = b"payload=" + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    before = _written()

    response = client_for("owner").post(
        url, data=body, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 413, (url, response.content[:200])
    assert response.json() == {
        "error": {"code": "too_large", "message": "The request is too large.", "field": None}
    }
    assert _written() == before


@pytest.mark.parametrize("route", MACHINE_URLS)
def test_a_form_with_too_many_fields_is_400_malformed_in_the_error_shape(
    client_for, site, make_order, route
):
    url = route.format(site=site.pk, order=make_order().id)
    body = "&".join(f"f{n}=1" for n in range(1001))
    before = _written()

    response = client_for("owner").post(
        url, data=body, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 400, (url, response.content[:200])
    assert response.json()["error"]["code"] == "malformed"
    assert _written() == before


def test_a_page_form_over_djangos_limit_is_413_for_a_browser_and_a_json_client(
    client_for, settings
):
    client = client_for("owner")
    body = b"name=" + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    def post(accept: str):
        return client.post(
            "/settings/reasons/add/",
            data=body,
            content_type="application/x-www-form-urlencoded",
            headers={"Accept": accept},
        )

    page = post("text/html")
    assert page.status_code == 413
    assert page["Content-Type"].startswith("text/html")  # the page: test_forms_over_djangos_limits
    assert "That form was too large to send" in page.content.decode()
    assert post("application/json").json()["error"]["code"] == "too_large"


# --- methods and paths a machine endpoint does not have -----------------------------------------
# The rails' webhooks and Slack's interactions answered another method with Django's empty
# text/html 405, and a path under /api/, /webhooks/ or /slack/ that names nothing with the HTML
# 404 page: their callers read JSON, as for the 400 and 413 above.


@pytest.mark.parametrize("route", MACHINE_URLS)
@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "OPTIONS"])
def test_a_method_a_machine_endpoint_does_not_take_is_405_in_the_error_shape(
    client_for, site, make_order, route, method
):
    url = route.format(site=site.pk, order=make_order().id)
    before = _written()

    response = client_for("owner").generic(method, url)

    assert response.status_code == 405, (url, method, response.content[:200])
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in response["Allow"] and "OPTIONS" not in response["Allow"]
    assert _written() == before


# DRF answered OPTIONS on every API view (the mandate API to anyone) with 200 and its metadata:
# the view's class name, its docstring and the media types it parses, an answer neither the
# README nor the schema names. Sill serves no cross-origin callers, so no preflight needs it: it
# is a method the API does not take, 405 as any other, and no answer's Allow lists it.


def _api_views(resolver: URLResolver, prefix: str = "") -> list[tuple[str, Any]]:
    """(route, view instance) of every DRF view the project routes to."""
    from rest_framework.views import APIView

    out = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            out += _api_views(entry, prefix + str(entry.pattern))
            continue
        cls = getattr(entry.callback, "cls", None)
        if isinstance(cls, type) and issubclass(cls, APIView):
            out.append((prefix + str(entry.pattern), cls(**entry.callback.initkwargs)))
    return out


def test_no_api_view_takes_options():
    views = _api_views(get_resolver())
    assert {route for route, _ in views} >= {"api/v1/mandates", "api/v1/agent", "api/schema/"}
    for route, view in views:
        assert "OPTIONS" not in view.allowed_methods, route


@pytest.mark.parametrize(
    "url",
    ["/api/v1/mandates", "/api/schema/", "/.well-known/sill-audit-keys.json", "/api/v1/agent"],
)
def test_options_is_405_in_the_error_shape_for_anyone(settings, agent, url):
    from sill.accounts import two_factor
    from sill.accounts.services import issue_agent_token

    settings.SILL_PUBLIC_SCHEMA = True
    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )

    bearer = {"Authorization": f"Bearer {token}"} if url == "/api/v1/agent" else {}
    response = Client().options(url, headers={**bearer, "Accept": "application/json"})

    assert response.status_code == 405, (url, response.content[:200])
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "OPTIONS" not in response["Allow"]


@pytest.mark.parametrize(
    "url", ["/api/v1/nothing", "/webhooks/stripe/{site}/", "/webhooks/nothing/{site}", "/slack/x"]
)
def test_a_path_under_a_machine_prefix_that_names_nothing_is_404_in_the_error_shape(
    client, site, url
):
    response = client.post(url.format(site=site.pk), data=b"{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# --- a body that is not JSON -------------------------------------------------------------------
# Every API POST reads JSON only. The staff and rules APIs refused another Content-Type with 415
# (DRF's parser choice), the mandate API read any body as JSON whatever it said; none of the
# schemas named 415.

API_POSTS = {
    "/api/v1/mandates": "/api/v1/mandates",
    "/api/order/{order}/refund": "/api/order/{order_id}/refund",
    "/api/v1/sites/{site}/rules": "/api/v1/sites/{site_id}/rules",
    "/api/v1/sites/{site}/rules/from-template": "/api/v1/sites/{site_id}/rules/from-template",
}


@pytest.mark.parametrize("route", sorted(API_POSTS))
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_an_api_post_whose_body_is_not_json_is_415_as_the_schema_says(
    client_for, site, make_order, settings, route, content_type
):
    from tests.openapi import check_answer, served_schema

    settings.SILL_PUBLIC_SCHEMA = True
    url = route.format(site=site.pk, order=make_order().id)
    before = _written()

    response = client_for("owner").generic(
        "POST", url, data=b'{"full": true, "templateId": "x"}', content_type=content_type
    )

    assert response.status_code == 415, (url, response.content[:200])
    assert response.json()["error"]["code"] == "unsupported_media_type"
    check_answer(served_schema(), API_POSTS[route], "POST", response)
    assert _written() == before


# --- a chunked body ----------------------------------------------------------------------------
# Django reads a body only as far as its Content-Length, and a chunked one has none (the WSGI
# server leaves CONTENT_LENGTH out, as gunicorn does): every view saw an empty body. A signed
# mandate sent chunked was "400 malformed: The body is not valid JSON.", a staff refund was
# refused for the fields it had sent, a webhook for its signature.


@pytest.mark.parametrize("route", MACHINE_URLS)
def test_a_chunked_body_is_411_length_required_in_the_error_shape(
    client_for, site, make_order, route
):
    url = route.format(site=site.pk, order=make_order().id)
    before = _written()

    response = client_for("owner").generic(
        "POST",
        url,
        data=b'{"full": true}',
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )

    assert response.status_code == 411, (url, response.content[:200])
    assert response.json()["error"]["code"] == "length_required"
    assert "Content-Length" in response.json()["error"]["message"]
    assert _written() == before


@pytest.mark.parametrize("route", sorted(API_POSTS))
def test_an_api_posts_411_is_the_schemas(client_for, site, make_order, settings, route):
    from tests.openapi import check_answer, served_schema

    settings.SILL_PUBLIC_SCHEMA = True
    url = route.format(site=site.pk, order=make_order().id)
    response = client_for("owner").generic(
        "POST", url, data=b"{}", content_type="application/json",
        CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked",
    )  # fmt: skip
    assert response.status_code == 411
    check_answer(served_schema(), API_POSTS[route], "POST", response)


# --- a Content-Length Django cannot read -------------------------------------------------------
# Django reads ``request.body`` after ``int(CONTENT_LENGTH)``, which refuses a length that is
# not a number ("abc", "1e3", "²") or has more than 4300 digits: a ValueError, so a 500 on every
# rail's webhook and Slack's interactions (they read the body), and on the API for any form POST
# (RefuseNulMiddleware reads it). The mandate API checked its own length before reading; the rest
# did not. Such a length is now refused before anything reads the body, as one over the limit.

UNREADABLE_LENGTHS = ["abc", "1e3", "\u00b2", "0" * 4400 + "2"]


@pytest.mark.parametrize("length", UNREADABLE_LENGTHS, ids=["letters", "exponent", "sup2", "4401"])
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("route", MACHINE_URLS)
def test_a_content_length_django_cannot_read_is_413_too_large_not_a_500(
    client_for, site, make_order, route, content_type, length
):
    url = route.format(site=site.pk, order=make_order().id)
    client = client_for("owner")
    client.raise_request_exception = False
    before = _written()

    response = client.generic(
        "POST", url, data=b'{"a": 1}', content_type=content_type, CONTENT_LENGTH=length
    )

    assert response.status_code == 413, (url, response.status_code, response.content[:200])
    assert response.json()["error"]["code"] == "too_large"
    assert _written() == before
