"""``POST /api/v1/mandates``: a deeply nested body is ``400 malformed`` before any key lookup.

Reproduces issue 9, defect 3: a 1.5 KB body nested 800 levels deep was a 500 for anyone,
unauthenticated, because the NUL check walked the parsed document recursively.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from audit.models import AuditRecord
from refunds.models import Mandate, Refund

pytestmark = pytest.mark.django_db

MANDATE_ID = "mnd_01K6HBK7MK753DH3YBX4NVCYTT"


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _body(site, inner: str) -> bytes:
    """A mandate of depth ``2 + depth(inner)``: its identity is there, its key is not."""
    signed = {"mandate_id": MANDATE_ID, "site_id": site.id, "agent_id": "agent_nobody"}
    envelope = {"algorithm": "ed25519", "key_id": "nope", "signature": "x" * 86}
    text = json.dumps({"signed": signed, "envelope": envelope})
    return text.replace('"agent_nobody"', f'"agent_nobody", "deep": {inner}', 1).encode()


def _post(body: bytes):
    return Client().post("/api/v1/mandates", data=body, content_type="application/json")


def _nothing_written() -> bool:
    return not (Mandate.objects.exists() or Refund.objects.exists() or AuditRecord.objects.exists())


@pytest.mark.parametrize("levels", [400, 800])
def test_it_refuses_a_small_deeply_nested_body_as_malformed(site, levels):
    body = _nested(levels).encode()
    assert len(body) < 1700  # about 1.5 KB

    response = _post(body)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "malformed"
    assert _nothing_written()


def test_it_refuses_deep_nesting_inside_signed_before_looking_up_the_key(site):
    response = _post(_body(site, _nested(790)))

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "malformed"
    assert _nothing_written()


def test_it_allows_32_levels_and_refuses_33(site):
    at_limit = _post(_body(site, _nested(30)))  # 1 (top) + 1 (signed) + 30
    over = _post(_body(site, _nested(31)))

    assert at_limit.status_code == 401, at_limit.content
    assert at_limit.json()["error"]["code"] == "unknown_key"
    assert over.status_code == 400, over.content
    assert over.json()["error"] == {
        "code": "malformed",
        "message": "The body is nested deeper than 32 levels.",
        "field": None,
    }
    assert _nothing_written()
