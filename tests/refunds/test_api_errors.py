"""Every error code of the agent API, each with nothing written and nothing sent to a rail."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from nacl.signing import SigningKey

from audit.models import AuditRecord
from refunds.agent.mandates import MAX_QUANTITY
from refunds.models import Mandate, Refund
from sill.accounts import two_factor
from sill.orders.models import LineItem, Order
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


def test_an_unsigned_body_with_an_issued_at_beyond_the_calendar_is_a_bad_signature(sign, original):
    """issued_at is read before the signature is checked (to test the key's validity): one
    whose UTC date leaves the calendar must not be a 500 for anyone, key or not."""
    doc = json.loads(sign(refund_intent(ORIGINAL)))
    doc["signed"]["issued_at"] = "0001-01-01T00:00:00+01:00"  # year 0 in UTC
    doc["envelope"]["signature"] = "A" * 86  # not a signature of anything
    response = post(Client(raise_request_exception=False), json.dumps(doc).encode())
    assert response.status_code == 401, response.status_code
    assert response.json()["error"]["code"] == "bad_signature"
    assert Mandate.objects.count() == 0


def _line(**overrides):
    return {"sku": "NW-HB-1KG", "name": "House Blend", "quantity": 1,
            "unit_price": Decimal("89.00"), **overrides}  # fmt: skip


# Each passes the schema's own bounds (text: non-blank, at most 255 characters; quantity: a
# positive integer) but not the column it is stored in: LineItem.quantity is an integer
# (PostgreSQL's, 2**31 - 1 at most), LineItem.sku a varchar(100), Order.buyer_name /
# Customer.name varchar(200), Order.buyer_email / Customer.email varchar(254); and a total
# its audit record cannot hold.
TOO_BIG_TO_STORE = {
    "quantity_2**31": (
        {"line_items": [_line(quantity=2**31, unit_price=Decimal("0.01"))],
         "quoted_total": Decimal(2**31) / 100},  # the total matches the lines
        "signed.intent.line_items.0.quantity",
    ),
    "sku_101": ({"line_items": [_line(sku="S" * 101)]}, "signed.intent.line_items.0.sku"),
    # A total over 2**53 - 1 minor units (the first whole dollar over it), which the
    # purchase's signed decision record cannot hold as an exact integer.
    "quoted_total_2**53": (
        {"line_items": [_line(unit_price=Decimal("90071992547410"))],
         "quoted_total": Decimal("90071992547410")},
        "signed.intent.quoted_total",
    ),
    "buyer_name_201": (
        {"buyer": {"name": "N" * 201, "email": "ada@example.com"}},
        "signed.intent.buyer.name",
    ),
    "buyer_email_255": (
        {"buyer": {"name": "Ada", "email": "a" * 243 + "@example.com"}},
        "signed.intent.buyer.email",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TOO_BIG_TO_STORE))
def test_a_purchase_value_its_column_cannot_hold_is_invalid_field_not_a_500(
    case, sign, mock_rail, django_capture_on_commit_callbacks
):
    overrides, field = TOO_BIG_TO_STORE[case]
    intent = purchase_intent(
        **{"line_items": [_line()], "quoted_total": Decimal("89.00"), **overrides}
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post(Client(raise_request_exception=False), sign(intent))
    assert response.status_code == 422, response.status_code
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert Mandate.objects.count() == 0 and Order.objects.count() == 0
    assert AuditRecord.objects.count() == 0 and callbacks == []


def test_the_largest_quantity_is_the_largest_the_quantity_column_holds():
    quantity = LineItem._meta.get_field("quantity")
    largest = connection.ops.integer_field_range(quantity.get_internal_type())[1]
    # PostgreSQL's integer exactly; SQLite's integers are wider (64 bits).
    assert largest == MAX_QUANTITY if connection.vendor == "postgresql" else largest > MAX_QUANTITY


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


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""],
)
def test_a_mandate_not_sent_as_json_is_415_and_writes_nothing(
    sign, original, content_type, django_capture_on_commit_callbacks
):
    """The mandate API read any body as JSON whatever its Content-Type said (a signed mandate
    sent as text/plain, a form or with none was refunded, 201), where every other API POST
    refuses what is not JSON with 415: it is refused the same way, before it is read."""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = Client().generic(
            "POST",
            "/api/v1/mandates",
            data=sign(refund_intent(ORIGINAL)),
            content_type=content_type,
        )
    assert response.status_code == 415, response.content
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert response.json()["error"]["message"]
    assert (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count()) == (
        0,
        0,
        0,
    )
    assert MockLedgerEntry.objects.count() == 0 and callbacks == []
    # JSON with its parameters, in any case, is JSON.
    for json_type in ("application/json; charset=utf-8", "Application/JSON"):
        answer = Client().post(
            "/api/v1/mandates", data=sign(refund_intent(ORIGINAL)), content_type=json_type
        )
        assert answer.status_code == 201, (json_type, answer.content)


def test_it_refuses_get_and_other_methods_on_the_mandate_endpoint():
    response = Client().get("/api/v1/mandates")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("length", ["0" * 4400 + "2", "\u00b2", "-1"])
def test_a_content_length_int_cannot_read_is_too_large_not_a_500(length):
    # Django tolerates any CONTENT_LENGTH (it reads none of the body); the view read it with
    # int(), which refuses more than 4300 digits.
    response = Client().post(
        "/api/v1/mandates", data=b"{}", content_type="application/json", CONTENT_LENGTH=length
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_an_accept_header_the_api_cannot_answer_is_406_not_acceptable_and_writes_nothing(
    sign, original
):
    """The API answers JSON only. A client asking for another form gets 406 under a code of
    its own, before anything is read or written (it was the catch-all code ``error``)."""
    before = (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count())
    response = Client().post(
        "/api/v1/mandates",
        data=sign(refund_intent(ORIGINAL)),
        content_type="application/json",
        headers={"Accept": "text/html"},
    )
    assert response.status_code == 406
    assert response.json()["error"]["code"] == "not_acceptable"
    assert (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count()) == before
    assert MockLedgerEntry.objects.count() == 0


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        ("application/json;q=0", 406),
        ("application/json; q=0.000", 406),
        ("*/*;q=0", 406),
        ("application/*;q=0", 406),
        # The most specific range says (RFC 9110 section 12.5.1): JSON is refused even though
        # anything else is welcome.
        ("application/json;q=0, */*", 406),
        ("text/html, application/json;q=0", 406),
        ("application/json;q=0.001", 200),
        ("*/*;q=0, application/json", 200),
        ("application/json;q=0.5, text/html", 200),
        ("application/json;q=0.5", 200),
        ("*/*;q=0.8", 200),
        ("application/json;q=nonsense", 200),  # a weight that is no weight weighs nothing
    ],
)
def test_an_accept_header_that_refuses_json_with_q_0_is_406_and_writes_nothing(
    sign, original, agent, accept, status
):
    """``q=0`` is "not acceptable" (RFC 9110 section 12.4.2): ``Accept: application/json;q=0``
    was answered with JSON, as if the weight were not there."""
    from sill.accounts.services import issue_agent_token

    before = (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count())
    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    read = Client().get(
        "/api/v1/agent", headers={"Authorization": f"Bearer {token}", "Accept": accept}
    )
    assert read.status_code == status, read.content
    # The range's parameters (its weight) are the client's, never the answer's type.
    assert read["Content-Type"] == "application/json"
    if status == 406:
        assert read.json()["error"]["code"] == "not_acceptable"
        response = Client().post(
            "/api/v1/mandates",
            data=sign(refund_intent(ORIGINAL)),
            content_type="application/json",
            headers={"Accept": accept},
        )
        assert response.status_code == 406, response.content
        assert response.json()["error"]["code"] == "not_acceptable"
        assert (
            Mandate.objects.count(),
            Refund.objects.count(),
            AuditRecord.objects.count() - 1,  # the token's issue_token record
        ) == before
        assert MockLedgerEntry.objects.count() == 0


@pytest.mark.parametrize("fmt", ["xml", "api", "html", "yaml"])
def test_a_format_parameter_the_api_cannot_answer_is_406_not_acceptable_and_writes_nothing(
    sign, original, agent, fmt
):
    """DRF answered ``?format=xml`` with its 404: ``POST /api/v1/mandates?format=xml`` was
    ``404 not_found`` "Request refused." on a path that exists. It is the README's 406."""
    from sill.accounts.services import issue_agent_token

    before = (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count())
    response = Client().post(
        f"/api/v1/mandates?format={fmt}",
        data=sign(refund_intent(ORIGINAL)),
        content_type="application/json",
    )
    assert response.status_code == 406, response.content
    assert response.json()["error"]["code"] == "not_acceptable"
    assert (Mandate.objects.count(), Refund.objects.count(), AuditRecord.objects.count()) == before
    assert MockLedgerEntry.objects.count() == 0

    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    bearer = {"Authorization": f"Bearer {token}"}
    for path in ("/api/v1/agent", f"/api/v1/refunds/{ORIGINAL}"):
        read = Client().get(f"{path}?format={fmt}", headers=bearer)
        assert read.status_code == 406, (path, read.content)
        assert read.json()["error"]["code"] == "not_acceptable"
    assert Client().get("/api/v1/agent?format=json", headers=bearer).status_code == 200
