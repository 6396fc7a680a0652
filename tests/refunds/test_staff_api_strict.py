"""``POST /api/order/{order_id}/refund`` reads JSON strictly: bad input is a 400, nothing moves.

Reproduces issue 9, defects 3 and 4 on the staff API: a deeply nested body was a 500 for any
signed-in member; a duplicated key was accepted (the last one won: 1.00 then 2.00 refunded
2.00); non-ASCII digits were read as numbers (Arabic-Indic "10", ``"\\u0661\\u0660"``,
refunded 10.00).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from audit.models import AuditRecord
from refunds.models import IdempotencyRecord, Refund
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db

# str.translate tables: ASCII 0-9 to U+0660-U+0669 and to U+FF10-U+FF19.
ARABIC_INDIC = {ord("0") + i: 0x0660 + i for i in range(10)}
FULLWIDTH = {ord("0") + i: 0xFF10 + i for i in range(10)}


@pytest.fixture
def send(client_for, order, leaf, django_capture_on_commit_callbacks):
    """``send(text)``: the raw JSON text, posted by a staff member who may refund."""
    client: Client = client_for("staff")

    def post(text: str):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                f"/api/order/{order.id}/refund", data=text, content_type="application/json"
            )

    return post


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _error(response) -> dict:
    assert response.status_code == 400, response.content
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}
    return body["error"]


@pytest.fixture
def nothing_moved(order, leaf):
    """``nothing_moved()``: no refund, no rail refund, no audit record since the fixtures."""
    audit_before = AuditRecord.objects.count()  # the reasons and the rail wrote some

    def check() -> bool:
        return (
            not Refund.objects.exists()
            and AuditRecord.objects.count() == audit_before
            and not MockLedgerEntry.objects.filter(kind="refund").exists()
        )

    return check


# --- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [400, 800])
def test_it_refuses_a_deeply_nested_body(nothing_moved, send, leaf, levels):
    text = f'{{"full": true, "reasonId": "{leaf.pk}", "x": {_nested(levels)}}}'
    assert len(text) < 1700  # about 1.5 KB

    error = _error(send(text))

    assert error["code"] == "malformed"
    assert nothing_moved()


def test_it_refuses_a_bare_deeply_nested_array(nothing_moved, send):
    assert _error(send(_nested(800)))["code"] == "malformed"
    assert nothing_moved()


def test_it_allows_32_levels_and_refuses_33(nothing_moved, send, leaf):
    over = send(f'{{"full": true, "reasonId": "{leaf.pk}", "x": {_nested(32)}}}')
    assert _error(over) == {
        "code": "malformed",
        "message": "The body is nested deeper than 32 levels.",
        "field": None,
    }
    assert nothing_moved()

    at_limit = send(f'{{"full": true, "reasonId": "{leaf.pk}", "x": {_nested(31)}}}')
    assert at_limit.status_code == 201, at_limit.content


def test_brackets_inside_strings_do_not_count(send, leaf):
    note = '[{\\"' * 200  # 800 brackets and escaped quotes, at depth 1
    response = send(f'{{"full": true, "reasonId": "{leaf.pk}", "reason": "{note}"}}')
    assert response.status_code == 201, response.content


# --- duplicate keys and constants ------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        '{{"amount": "1.00", "amount": "2.00", "reasonId": "{pk}"}}',
        '{{"amount": 1.00, "reasonId": "{pk}", "amount": 2.00}}',
        '{{"full": true, "reasonId": "{pk}", "reasonId": "{pk}"}}',
        '{{"full": true, "reasonId": "{pk}", "meta": {{"a": 1, "a": 2}}}}',
        '{{"full": true, "reasonId": "{pk}", "meta": [{{"b": {{"a": 1, "a": 1}}}}]}}',
    ],
)
def test_it_refuses_duplicate_keys_at_any_depth(nothing_moved, send, leaf, template):
    error = _error(send(template.format(pk=leaf.pk)))

    assert error["code"] == "malformed"
    assert "appears twice" in error["message"]
    assert nothing_moved()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_it_refuses_nan_and_infinity(nothing_moved, send, leaf, constant):
    error = _error(send(f'{{"amount": {constant}, "reasonId": "{leaf.pk}"}}'))

    assert error["code"] == "malformed"
    assert nothing_moved()


@pytest.mark.parametrize("number", ["1e999999999", "1e-999999999", "1e400"])
def test_it_refuses_a_number_no_double_can_hold(nothing_moved, send, leaf, number):
    error = _error(send(f'{{"amount": {number}, "reasonId": "{leaf.pk}"}}'))

    assert error["code"] == "malformed"
    assert nothing_moved()


def test_it_still_reads_a_json_number_exactly(send, leaf):
    response = send(f'{{"amount": 10.10, "reasonId": "{leaf.pk}"}}')

    assert response.status_code == 201, response.content
    assert response.json()["amount"] == "10.10"


# --- non-ASCII digits -------------------------------------------------------------------------


@pytest.mark.parametrize("digits", [ARABIC_INDIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("amount", {"amount": "10"}),
        ("amount", {"amount": "10.00"}),
        ("percentage", {"percentage": "25"}),
        ("expectedRemaining", {"full": True, "expectedRemaining": "89.00"}),
    ],
)
def test_it_refuses_non_ascii_digits(nothing_moved, send, leaf, digits, field, body):
    body = {**body, field: body[field].translate(digits), "reasonId": str(leaf.pk)}

    error = _error(send(json.dumps(body, ensure_ascii=False)))

    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert nothing_moved()


@pytest.mark.parametrize("digits", [ARABIC_INDIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
def test_it_refuses_a_reason_id_in_non_ascii_digits(nothing_moved, send, leaf, digits):
    body = {"full": True, "reasonId": str(leaf.pk).translate(digits)}

    error = _error(send(json.dumps(body, ensure_ascii=False)))

    assert (error["code"], error["field"]) == ("invalid_field", "reasonId")
    assert nothing_moved()


@pytest.mark.parametrize("value", ["²", "1²", "¹⁰", "1_0", " 1 0 "])
def test_other_digit_look_alikes_are_a_400_not_a_500(nothing_moved, send, leaf, value):
    for body in (
        {"amount": value, "reasonId": str(leaf.pk)},
        {"percentage": value, "reasonId": str(leaf.pk)},
        {"full": True, "reasonId": value},
    ):
        error = _error(send(json.dumps(body, ensure_ascii=False)))
        assert error["code"] == "invalid_field", (body, error)
    assert nothing_moved()


# --- size ------------------------------------------------------------------------------------
# A signed-in member could send a body of any size up to Django's DATA_UPLOAD_MAX_MEMORY_SIZE
# (2.5 MB): DRF read it whole into memory for StrictJSONParser, which parsed all of it (a body
# padded past 64 KiB was refunded); past 2.5 MB the answer was Django's HTML "Bad Request"
# page. Now SILL_API_MAX_BODY_BYTES (64 KiB) is 413 too_large, judged on the Content-Length
# before any of the body is read.


def _padded(text: str, size: int) -> str:
    """``text`` (a JSON object) grown to exactly ``size`` bytes with spaces before its ``}``."""
    padded = text[:-1] + " " * (size - len(text.encode())) + "}"
    assert len(padded.encode()) == size
    return padded


def _too_large(response) -> dict:
    assert response.status_code == 413, response.content
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == "too_large"
    assert body["error"]["field"] is None
    return body["error"]


def test_it_refuses_a_body_over_the_limit(nothing_moved, send, leaf, settings):
    limit = settings.SILL_API_MAX_BODY_BYTES
    assert limit == 64 * 1024

    error = _too_large(send(_padded(f'{{"full": true, "reasonId": "{leaf.pk}"}}', limit + 1)))

    assert error["message"] == "The body is larger than 65536 bytes."
    assert nothing_moved()


def test_a_body_at_the_limit_is_still_read(send, leaf, settings):
    text = _padded(f'{{"full": true, "reasonId": "{leaf.pk}"}}', settings.SILL_API_MAX_BODY_BYTES)

    response = send(text)

    assert response.status_code == 201, response.content


def test_a_declared_length_over_the_limit_is_refused_before_reading(
    nothing_moved, client_for, order, leaf
):
    # The Content-Length alone decides: the few bytes actually sent are never parsed.
    response = client_for("staff").post(
        f"/api/order/{order.id}/refund",
        data=f'{{"full": true, "reasonId": "{leaf.pk}"}}',
        content_type="application/json",
        CONTENT_LENGTH=str(10 * 1024 * 1024),
    )

    _too_large(response)
    assert nothing_moved()


def test_a_refused_large_body_claims_no_idempotency_key(nothing_moved, client_for, order, leaf):
    client = client_for("staff")
    body = f'{{"full": true, "reasonId": "{leaf.pk}"}}'

    def post(text: str):
        return client.post(
            f"/api/order/{order.id}/refund",
            data=text,
            content_type="application/json",
            headers={"Idempotency-Key": "one-key"},
        )

    _too_large(post(_padded(body, 64 * 1024 + 1)))
    assert nothing_moved() and not IdempotencyRecord.objects.exists()

    assert post(body).status_code == 201  # the same key, with a body that fits


def test_a_chunked_body_without_a_length_is_411_and_never_read(nothing_moved, client_for, order):
    # Under WSGI a body with no Content-Length (Transfer-Encoding: chunked) reaches Django as
    # no body at all: nothing of the megabyte is read. The empty body was refused for naming
    # no reason (400 invalid_field reasonId), which the body sent did name; it is refused for
    # what it is. (A stream that does arrive without a length is read to one byte past the
    # limit at most: tests/test_json_bodies.py.)
    response = client_for("staff").post(
        f"/api/order/{order.id}/refund",
        data=b'{"full": true, "x": "' + b"x" * (1024 * 1024) + b'"}',
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )

    assert response.status_code == 411
    assert response.json()["error"]["code"] == "length_required"
    assert nothing_moved()


# --- types -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "True", "1", 1, "yes", "on", "false", "0", 0, "", None])
def test_full_is_a_json_boolean_only(nothing_moved, send, leaf, value):
    """``"full": "true"`` (or ``1``, ``"yes"``, ``"on"``) refunded the whole order, and
    ``"full": "false"`` or ``0`` was read as false: DRF's BooleanField reads any of those. A
    client sending the wrong type is told so, and nothing moves."""
    error = _error(send(json.dumps({"full": value, "reasonId": str(leaf.pk)})))

    assert (error["code"], error["field"]) == ("invalid_field", "full")
    assert "true or false" in error["message"]
    assert nothing_moved()
