"""The OpenAPI schema of the agent API, held to what the API answers: each answer an agent can
get from ``POST /api/v1/mandates``, ``GET /api/v1/refunds/{mandate_id}`` and
``GET /api/v1/agent`` (each documented status and error code, each kind of mandate) is a
status the schema lists for that operation, with a body valid against the schema's response
for it (tests/openapi.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.urls import get_resolver
from django.utils import timezone
from pytest_django.fixtures import Settings

from refunds.agent.mandates import ERROR_CODES
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentToken
from sill.accounts.services import issue_agent_token, token_sha256
from tests.broker_down import cache_unreachable
from tests.conftest import site_owner
from tests.openapi import check_answer, served_schema
from tests.refunds.conftest import ORIGINAL, purchase_intent, refund_intent, require_approval

pytestmark = pytest.mark.django_db

CREATE = ("/api/v1/mandates", "POST")
DETAIL = "/api/v1/refunds/{mandate_id}"
ME = "/api/v1/agent"
JSON_BODY = "application/json"


@pytest.fixture
def schema(settings: Settings) -> dict[str, Any]:
    settings.SILL_PUBLIC_SCHEMA = True  # README: The OpenAPI schema
    return served_schema()


@pytest.fixture
def own_counters(settings: Settings) -> None:
    """Rate-limit counters of this test only (the default cache under a prefix of its own)."""
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }


@pytest.fixture
def bearer(agent: Agent) -> dict[str, str]:
    owner = site_owner(agent.site)
    token = issue_agent_token(agent=agent, actor=owner, second_factor=two_factor.OPERATOR)
    return {"Authorization": f"Bearer {token}"}


def _post(body: bytes, **headers: str) -> Any:
    return Client().post("/api/v1/mandates", body, content_type=JSON_BODY, headers=headers)


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_every_kind_of_mandate_answer_is_the_schemas(
    schema, site, original, sign, api, bearer
) -> None:
    def created(body: bytes) -> dict[str, Any]:
        answer = api(body)
        check_answer(schema, *CREATE, answer)
        assert answer.status_code == 201, answer.content
        read = Client().get(f"/api/v1/refunds/{answer.json()['mandate_id']}", headers=bearer)
        check_answer(schema, DETAIL, "GET", read)
        return dict(answer.json())

    approved_body = sign(refund_intent(ORIGINAL))
    approved = created(approved_body)
    assert (approved["decision"], approved["status"]) == ("approved", "processing")
    resent = _post(approved_body)
    check_answer(schema, *CREATE, resent)
    assert resent.status_code == 200 and resent.json()["status"] == "succeeded"

    rejected = created(sign(refund_intent(ORIGINAL)))  # one agent refund per order
    assert (rejected["decision"], rejected["reason"]) == ("rejected", "already_executed")

    purchase = created(sign(purchase_intent()))
    assert purchase["order_id"] and purchase["receipt"] is None
    no_rail = created(sign(purchase_intent(payment={"rail": "stripe", "payment_method": "pm_1"})))
    assert (no_rail["reason"], no_rail["rail"]) == ("rail_disabled", None)

    credit = created(
        sign(
            {
                "action": "credit_customer",
                "merchant": "roasters.example",
                "customer": "cus_NffrFeUfNV2Hib",
                "amount": Decimal("12.50"),
                "currency": "USD",
                "reason_code": "not_received",
            }
        )
    )
    assert credit["reason"] == "unknown_customer"

    require_approval(site, origin="agent")
    paid = created(sign(purchase_intent()))  # an order whose refund the new rule holds
    assert paid["status"] in ("processing", "succeeded")
    escalated = created(sign(refund_intent(paid["mandate_id"])))
    assert (escalated["decision"], escalated["status"]) == ("escalated", "held")
    assert escalated["expires_at"] and escalated["rules"]


def _refusals(signer: Callable[..., bytes]) -> dict[str, bytes]:
    """A request body for each mandate error code answered before anything is stored."""
    now = datetime.now(UTC).replace(microsecond=0)
    good = json.loads(signer(refund_intent(ORIGINAL)))
    unsupported = {**good, "envelope": {**good["envelope"], "algorithm": "rsa"}}
    unknown_key = {**good, "envelope": {**good["envelope"], "key_id": "nobody"}}
    forged = {**good, "envelope": {**good["envelope"], "signature": "A" * 86}}
    return {
        "malformed": b'{"signed": {}, "signed": {}}',
        "too_large": b"{" + b" " * (64 * 1024 + 1) + b"}",
        "unsupported_algorithm": json.dumps(unsupported).encode(),
        "unknown_key": json.dumps(unknown_key).encode(),
        "bad_signature": json.dumps(forged).encode(),
        "expired": signer(
            refund_intent(ORIGINAL),
            issued_at=_stamp(now - timedelta(seconds=200)),
            expires_at=_stamp(now - timedelta(seconds=100)),
        ),
        "not_yet_valid": signer(
            refund_intent(ORIGINAL),
            issued_at=_stamp(now + timedelta(seconds=100)),
            expires_at=_stamp(now + timedelta(seconds=200)),
        ),
        "window_too_long": signer(refund_intent(ORIGINAL), replay_window_seconds=301),
        "forbidden_field": signer(refund_intent(ORIGINAL, sku="NW-HB-1KG")),
        "unknown_field": signer(refund_intent(ORIGINAL, colour="blue")),
        "invalid_field": signer(refund_intent(ORIGINAL, max_amount=Decimal("1.001"))),
    }


def test_every_mandate_error_is_the_schemas(schema, original, sign) -> None:
    seen: dict[str, int] = {}
    for code, body in _refusals(sign).items():
        answer = _post(body)
        check_answer(schema, *CREATE, answer)
        seen[answer.json()["error"]["code"]] = answer.status_code
        assert answer.json()["error"]["code"] == code, (code, answer.content)
        if code == "invalid_field":  # a dotted path (docs/mandate-test-vectors.md)
            assert answer.json()["error"]["field"] == "signed.intent.max_amount"

    first = sign(refund_intent(ORIGINAL))
    assert _post(first).status_code == 201
    stored = json.loads(first)
    for code, change in {
        "mandate_conflict": {"mandate_id": stored["signed"]["mandate_id"]},
        "replay": {"nonce": stored["signed"]["nonce"]},
    }.items():
        answer = _post(sign(refund_intent(ORIGINAL, max_amount=Decimal("1.00")), **change))
        check_answer(schema, *CREATE, answer)
        assert answer.json()["error"]["code"] == code, (code, answer.content)
        seen[code] = answer.status_code

    assert seen == ERROR_CODES


def test_a_purchase_under_an_orders_mandate_id_is_the_conflict_the_schema_describes(
    schema, original, sign, mock_rail
) -> None:
    """README: 409 ``mandate_conflict`` is also a purchase whose ``mandate_id`` already names
    one of the site's orders (the demo's, placed with no stored mandate): a mandate id Sill
    never received, so the schema's 409 must say so, not only "received with another body"."""
    answer = _post(sign(purchase_intent(), mandate_id=ORIGINAL))
    check_answer(schema, *CREATE, answer)
    assert (answer.status_code, answer.json()["error"]["code"]) == (409, "mandate_conflict")
    assert "order" in answer.json()["error"]["message"]
    described = schema["paths"][CREATE[0]]["post"]["responses"]["409"]["description"]
    assert "already names one of the site's orders" in described


def test_the_schemas_own_examples_are_valid_answers(schema) -> None:
    """What an agent author copies from ``/api/schema/``."""
    for path, method in (CREATE, (DETAIL, "GET")):
        responses = schema["paths"][path][method.lower()]["responses"]
        examples = [
            (status, example["value"])
            for status, response in responses.items()
            for example in response["content"]["application/json"].get("examples", {}).values()
        ]
        assert examples, (path, method)
        for status, value in examples:
            check_answer(schema, path, method, _Answer(int(status), value))


class _Answer:
    """An answer as ``check_answer`` reads one: a status and JSON bytes."""

    def __init__(self, status_code: int, body: object) -> None:
        self.status_code, self.content = status_code, json.dumps(body).encode()


def test_the_read_endpoints_answers_are_the_schemas(schema, original, sign, agent, bearer) -> None:
    answer = _post(sign(refund_intent(ORIGINAL)))
    mine = f"/api/v1/refunds/{answer.json()['mandate_id']}"
    revoked = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    AgentToken.objects.filter(token_sha256=token_sha256(revoked)).update(revoked_at=timezone.now())
    for path, template in ((ME, ME), (mine, DETAIL)):
        for headers in (
            bearer,
            {},
            {"Authorization": "Bearer sill_at_made_up"},
            {"Authorization": f"Bearer {revoked}"},
            {"Authorization": "Basic YWdlbnQ6cGFzcw=="},
        ):
            read = Client().get(path, headers=headers)
            assert read.status_code == (200 if headers is bearer else 401), read.content
            check_answer(schema, template, "GET", read)
    missing = Client().get("/api/v1/refunds/mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN", headers=bearer)
    assert missing.status_code == 404
    check_answer(schema, DETAIL, "GET", missing)


@pytest.mark.parametrize(
    ("path", "template", "method"),
    [("/api/v1/mandates", *CREATE), (ME, ME, "GET"), ("/api/v1/refunds/mnd_x", DETAIL, "GET")],
)
def test_a_request_that_takes_no_json_answer_is_the_schemas(
    schema, agent, bearer, path, template, method
) -> None:
    client = Client()
    send = client.post if method == "POST" else client.get
    refused = send(path, headers={**bearer, "Accept": "text/html"})
    assert refused.status_code == 406, refused.content
    check_answer(schema, template, method, refused)


@pytest.mark.parametrize(
    ("path", "template", "method"),
    [("/api/v1/mandates", *CREATE), (ME, ME, "GET"), ("/api/v1/refunds/mnd_x", DETAIL, "GET")],
)
def test_a_failure_in_sill_is_answered_as_the_schema_says(schema, path, template, method) -> None:
    """What Django answers when the view raises (tests/test_error_pages.py)."""
    request = RequestFactory().generic(method, path, HTTP_ACCEPT="application/json")
    failed = get_resolver().resolve_error_handler(500)(request)
    assert failed.status_code == 500
    check_answer(schema, template, method, failed)


def test_the_rate_limits_and_a_cache_down_are_answered_as_the_schema_says(
    schema, settings, own_counters, original, sign, agent, bearer
) -> None:
    settings.SILL_API_RATES = {"address": "1/minute", "agent_token": "1/minute"}
    assert _post(sign(refund_intent(ORIGINAL))).status_code == 201
    limited = _post(sign(refund_intent(ORIGINAL)))
    assert limited.status_code == 429
    check_answer(schema, *CREATE, limited)
    for path, template in ((ME, ME), ("/api/v1/refunds/mnd_x", DETAIL)):
        Client().get(path, headers=bearer)
        limited = Client().get(path, headers=bearer)
        assert limited.status_code == 429
        check_answer(schema, template, "GET", limited)

    with cache_unreachable():
        down = _post(sign(refund_intent(ORIGINAL)))
        assert down.status_code == 503
        check_answer(schema, *CREATE, down)
        for path, template in ((ME, ME), ("/api/v1/refunds/mnd_x", DETAIL)):
            down = Client().get(path, headers=bearer)
            assert down.status_code == 503
            check_answer(schema, template, "GET", down)
