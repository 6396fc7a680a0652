"""The policy API reads JSON strictly: a deep, duplicated or odd body is a 400, nothing written.

Reproduces issue 9, defect 3 on ``POST /api/v1/sites/{site}/rules/from-template``: a body
nested 800 levels deep was a 500.
"""

from __future__ import annotations

import json

import pytest

from audit.models import AuditRecord
from policies.models import PolicyVersion
from tests.policies.test_api import apply

pytestmark = pytest.mark.django_db

# str.translate tables: ASCII 0-9 to U+0660-U+0669 and to U+FF10-U+FF19.
ARABIC_INDIC = {ord("0") + i: 0x0660 + i for i in range(10)}
FULLWIDTH = {ord("0") + i: 0xFF10 + i for i in range(10)}


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _error(response) -> dict:
    assert response.status_code == 400, response.content
    return response.json()["error"]


def _nothing_written() -> bool:
    return not PolicyVersion.objects.exists() and not AuditRecord.objects.exists()


@pytest.mark.parametrize("persona", ["owner", "admin"])
@pytest.mark.parametrize("levels", [400, 800])
def test_it_refuses_a_deeply_nested_body(members, site, persona, levels):
    body = f'{{"templateId": "conservative", "params": {{"holdOverUsd": {_nested(levels)}}}}}'
    assert len(body) < 1700  # about 1.5 KB

    error = _error(apply(members, persona, site.pk, body))

    assert error["code"] == "malformed"
    assert _nothing_written()


def test_it_allows_32_levels_and_refuses_33(members, site):
    def body(levels: int) -> str:  # 1 (top) + 1 (params) + the array
        return f'{{"templateId": "conservative", "params": {{"x": {_nested(levels - 2)}}}}}'

    at_limit = _error(apply(members, "owner", site.pk, body(32)))
    over = _error(apply(members, "owner", site.pk, body(33)))

    assert (at_limit["code"], at_limit["field"]) == ("invalid_field", "params.x")
    assert over == {
        "code": "malformed",
        "message": "The body is nested deeper than 32 levels.",
        "field": None,
    }
    assert _nothing_written()


@pytest.mark.parametrize(
    "body",
    [
        '{"templateId": "conservative", "templateId": "r07"}',
        '{"templateId": "conservative", "params": {"holdOverUsd": 10, "holdOverUsd": 90}}',
        '{"templateId": "conservative", "dryRun": true, "dryRun": false}',
    ],
)
def test_it_refuses_duplicate_keys(members, site, body):
    error = _error(apply(members, "owner", site.pk, body))

    assert error["code"] == "malformed" and "appears twice" in error["message"]
    assert _nothing_written()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999999999"])
def test_it_refuses_constants_and_numbers_out_of_range(members, site, number):
    body = f'{{"templateId": "conservative", "params": {{"holdOverUsd": {number}}}}}'

    assert _error(apply(members, "owner", site.pk, body))["code"] == "malformed"
    assert _nothing_written()


@pytest.mark.parametrize("digits", [ARABIC_INDIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
@pytest.mark.parametrize(
    ("template", "param", "value"),
    [("conservative", "holdOverUsd", "70.00"), ("old-charge", "oldChargeDays", "30")],
)
def test_it_refuses_non_ascii_digits_in_params(members, site, digits, template, param, value):
    body = {"templateId": template, "params": {param: value.translate(digits)}}

    error = _error(apply(members, "owner", site.pk, body))

    assert (error["code"], error["field"]) == ("invalid_field", f"params.{param}")
    assert _nothing_written()


@pytest.mark.parametrize("value", ["²", "3²", "¹⁰"])
def test_a_superscript_count_is_a_400_not_a_500(members, site, value):
    body = {"templateId": "old-charge", "params": {"oldChargeDays": value}}

    error = _error(apply(members, "owner", site.pk, body))

    assert (error["code"], error["field"]) == ("invalid_field", "params.oldChargeDays")
    assert _nothing_written()


def test_a_json_number_with_a_fraction_is_still_read_exactly(members, site):
    body = '{"templateId": "conservative", "params": {"holdOverUsd": 70.10}}'

    response = apply(members, "owner", site.pk, body)

    assert response.status_code == 201, response.content
    assert response.json()["rules"][0]["when"] == {"refundAmountUsd": {"gt": 7010}}


# --- size ------------------------------------------------------------------------------------
# A member who may edit rules could send a body of any size up to Django's 2.5 MB: DRF read it
# whole into memory and StrictJSONParser parsed all of it (past 2.5 MB: Django's HTML "Bad
# Request" page). Now a body over SILL_API_MAX_BODY_BYTES (64 KiB) is 413 too_large, judged
# on its Content-Length before any of it is read.

RULE = {"when": {"refundAmountUsd": {"gt": 5000}}, "then": {"action": "require_approval"}}


def _padded(doc: dict, size: int) -> str:
    """``doc`` as JSON text of exactly ``size`` bytes (spaces before the closing brace)."""
    text = json.dumps(doc)
    padded = text[:-1] + " " * (size - len(text)) + "}"
    assert len(padded.encode()) == size
    return padded


def _too_large(response) -> dict:
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error == {
        "code": "too_large",
        "message": "The body is larger than 65536 bytes.",
        "field": None,
    }
    return error


def _add_rule(client_for, site, text: str):
    return client_for("owner").post(
        f"/api/v1/sites/{site.pk}/rules", data=text, content_type="application/json"
    )


def test_a_rule_over_the_limit_is_refused(client_for, site, settings):
    assert settings.SILL_API_MAX_BODY_BYTES == 64 * 1024

    _too_large(_add_rule(client_for, site, _padded(RULE, 64 * 1024 + 1)))

    assert _nothing_written()


def test_a_rule_at_the_limit_is_still_added(client_for, site):
    response = _add_rule(client_for, site, _padded(RULE, 64 * 1024))

    assert response.status_code == 201, response.content
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_a_template_body_over_the_limit_is_refused(members, site):
    body = {"templateId": "conservative", "params": {"holdOverUsd": 70}}

    _too_large(apply(members, "owner", site.pk, _padded(body, 64 * 1024 + 1)))

    assert _nothing_written()
    at_limit = apply(members, "owner", site.pk, _padded(body, 64 * 1024))
    assert at_limit.status_code == 201, at_limit.content


def test_a_declared_length_over_the_limit_is_refused_unread(client_for, site):
    response = client_for("owner").post(
        f"/api/v1/sites/{site.pk}/rules",
        data=json.dumps(RULE),
        content_type="application/json",
        CONTENT_LENGTH=str(50 * 1024 * 1024),
    )

    _too_large(response)
    assert _nothing_written()
