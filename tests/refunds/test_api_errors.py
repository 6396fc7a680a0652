"""Every error code of the agent API, each with nothing written and nothing sent to a rail."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from nacl.signing import SigningKey

from audit.models import AuditRecord
from refunds.models import Mandate, Refund
from sill.orders.models import Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import ORIGINAL, post, purchase_intent, refund_intent

pytestmark = pytest.mark.django_db


def _ts(delta: timedelta) -> str:
    return (datetime.now(UTC).replace(microsecond=0) + delta).isoformat().replace("+00:00", "Z")


def _tamper(body: bytes, fn) -> bytes:
    doc = json.loads(body, parse_float=Decimal)
    fn(doc)
    return json.dumps(doc, default=str).encode()


CASES = {
    "malformed": (400, lambda sign: b"{not json"),
    "malformed_shape": (400, lambda sign: b'{"signed": []}'),
    "too_large": (413, lambda sign: b'{"signed": "' + b"x" * (64 * 1024) + b'"}'),
    "unsupported_algorithm": (
        400,
        lambda sign: _tamper(sign(refund_intent(ORIGINAL)), lambda d: d["envelope"].update(algorithm="rsa")),
    ),
    "unknown_key": (
        401,
        lambda sign: _tamper(sign(refund_intent(ORIGINAL)), lambda d: d["envelope"].update(key_id="nope")),
    ),
    "bad_signature": (
        401,
        lambda sign: sign(refund_intent(ORIGINAL), key=SigningKey(bytes(32))),
    ),
    "bad_signature_length": (
        401,
        lambda sign: _tamper(sign(refund_intent(ORIGINAL)), lambda d: d["envelope"].update(signature="abc")),
    ),
    "expired": (
        400,
        lambda sign: sign(refund_intent(ORIGINAL), issued_at=_ts(timedelta(seconds=-200)), expires_at=_ts(timedelta(seconds=-100))),
    ),
    "not_yet_valid": (
        400,
        lambda sign: sign(refund_intent(ORIGINAL), issued_at=_ts(timedelta(seconds=60)), expires_at=_ts(timedelta(seconds=120))),
    ),
    "window_too_long": (
        400,
        lambda sign: sign(refund_intent(ORIGINAL), replay_window_seconds=600, expires_at=_ts(timedelta(seconds=500))),
    ),
    "forbidden_field": (422, lambda sign: sign(refund_intent(ORIGINAL, sku="NW-HB-1KG"))),
    "unknown_field": (422, lambda sign: sign(refund_intent(ORIGINAL, colour="blue"))),
    "invalid_field": (422, lambda sign: sign(refund_intent(ORIGINAL, max_amount=Decimal("1.001")))),
    "invalid_field_purchase_total": (
        422,
        lambda sign: sign(purchase_intent(quoted_total=Decimal("90.00"))),
    ),
    "invalid_field_merchant": (
        422,
        lambda sign: sign(refund_intent(ORIGINAL, merchant="evil.example")),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_it_answers_each_error_code_and_writes_nothing(
    case, sign, original, django_capture_on_commit_callbacks
):
    status, build = CASES[case]
    before_orders = Order.objects.count()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = post(Client(), build(sign))
    assert response.status_code == status, response.content
    error = response.json()["error"]
    expected = {
        "malformed_shape": "malformed",
        "bad_signature_length": "bad_signature",
        "invalid_field_purchase_total": "invalid_field",
        "invalid_field_merchant": "invalid_field",
    }.get(case, case)
    assert error["code"] == expected
    assert error["message"]
    assert Mandate.objects.count() == 0
    assert Refund.objects.count() == 0
    assert AuditRecord.objects.count() == 0
    assert MockLedgerEntry.objects.count() == 0
    assert Order.objects.count() == before_orders
    assert callbacks == []


def test_replay_and_conflict_write_nothing_more(sign, original, django_capture_on_commit_callbacks):
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            post(
                client, sign(refund_intent(ORIGINAL, max_amount=Decimal("1.00")), nonce="n" * 20)
            ).status_code
            == 201
        )
    counts = (
        Mandate.objects.count(),
        Refund.objects.count(),
        AuditRecord.objects.count(),
        MockLedgerEntry.objects.count(),
    )
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        replay = post(client, sign(refund_intent(ORIGINAL), nonce="n" * 20))
    assert replay.status_code == 409 and replay.json()["error"]["code"] == "replay"
    assert callbacks == []
    assert counts == (
        Mandate.objects.count(),
        Refund.objects.count(),
        AuditRecord.objects.count(),
        MockLedgerEntry.objects.count(),
    )


def test_it_refuses_get_and_other_methods_on_the_mandate_endpoint():
    response = Client().get("/api/v1/mandates")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
