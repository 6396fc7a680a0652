"""Every operation of the OpenAPI schema documents the refusals its endpoint gives before (or
around) its own code: a caller without credentials, an ``Accept`` that leaves out JSON, a
failure in Sill, the rate limits and a cache that is down (sill/api_schema.py). Only the agent
API documented them: the staff API answered an anonymous caller 401 and the staff, rules and
templates APIs answered 406, none of which their schemas listed."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.urls import get_resolver

from tests.openapi import check_answer, served_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def operations(settings, site, make_order) -> list[tuple[str, str, str]]:
    """(url, path template, method) of every operation in the served schema."""
    settings.SILL_PUBLIC_SCHEMA = True
    order = make_order()
    ids = {"order_id": order.id, "site_id": site.pk, "mandate_id": "mnd_x", "rule_id": "r1"}
    return [
        (template.format(**ids, size="1"), template, method.upper())
        for template, methods in served_schema()["paths"].items()
        for method in methods
    ]


def _send(client: Client, url: str, method: str, **headers: str) -> Any:
    return client.generic(method, url, data=b"{}", content_type="application/json", headers=headers)


def test_every_operation_documents_the_refusals_any_api_view_gives(operations):
    schema = served_schema()
    for _url, template, method in operations:
        listed = schema["paths"][template][method.lower()]["responses"]
        assert {"429", "500", "503"} <= set(listed), (method, template)


def test_an_anonymous_caller_and_an_accept_without_json_are_answered_as_the_schema_says(
    operations, client_for
):
    schema = served_schema()
    owner = client_for("owner")
    for url, template, method in operations:
        check_answer(schema, template, method, _send(Client(), url, method))
        if template.startswith("/api/"):
            refused = _send(owner, url, method, Accept="text/html")
            assert refused.status_code == 406, (method, url, refused.content[:200])
            check_answer(schema, template, method, refused)


def test_a_failure_in_sill_is_answered_as_every_operations_schema_says(operations):
    schema = served_schema()
    for url, template, method in operations:
        request = RequestFactory().generic(method, url, HTTP_ACCEPT="application/json")
        failed = get_resolver().resolve_error_handler(500)(request)
        check_answer(schema, template, method, failed)


@pytest.mark.parametrize(
    "accept",
    [
        "*/*;q=0.5",
        "application/*",
        "*/*",
        None,  # no Accept header
        "application/vnd.oai.openapi",
        "application/yaml",
        "text/html",  # refused: 406
    ],
)
def test_the_schemas_refusals_are_json_whatever_format_it_would_be_served_in(
    settings, client_for, accept
):
    """Seen: ``/api/schema/`` answered its 401 (no login) as YAML for ``Accept: */*;q=0.5``,
    ``application/*``, ``*/*`` or no Accept at all, and its 406 too: the schema's own
    renderers (YAML first) wrote the error, which every other API answer and the schema
    itself give as JSON (``{"error": {...}}``). The schema is still served in the format
    negotiated; a refusal of it is JSON."""
    settings.SILL_PUBLIC_SCHEMA = False
    headers = {"Accept": accept} if accept else {}
    refused = Client().get("/api/schema/", headers=headers)
    assert refused.status_code == (406 if accept == "text/html" else 401)
    assert refused["Content-Type"] == "application/json"
    code = "not_acceptable" if accept == "text/html" else "not_authenticated"
    assert refused.json()["error"]["code"] == code
    if accept != "text/html":
        served = client_for("owner").get("/api/schema/", headers=headers)
        assert served.status_code == 200 and served.content.startswith(b"openapi: ")  # YAML
