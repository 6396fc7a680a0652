"""``POST /api/order/{order_id}/refund``: session auth with CSRF, roles, types, errors."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from refunds.models import Refund, RefundReason
from refunds.reasons.selectors import PATH_SEPARATOR
from refunds.reasons.services import set_reason_active
from sill.orders.models import OrderStatus
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client_for, clerk, django_capture_on_commit_callbacks):
    """``api(persona, order, body)`` → response; raw JSON text so numbers stay numbers."""

    def send(persona: str, order, body: dict | str, client: Client | None = None):
        if client is None:
            if persona == "clerk":
                client = Client()
                client.force_login(clerk.user)
            else:
                client = client_for(persona)
        text = body if isinstance(body, str) else json.dumps(body)
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                f"/api/order/{order.id}/refund", data=text, content_type="application/json"
            )

    return send


def _error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}
    return body["error"]


@pytest.mark.parametrize(
    ("persona", "status", "code"),
    [
        ("owner", 201, None),
        ("admin", 201, None),
        ("staff", 201, None),
        ("reviewer", 403, "forbidden"),
        ("clerk", 403, "forbidden"),
        ("outsider", 404, "not_found"),
        ("anonymous", 401, "not_authenticated"),
    ],
)
def test_who_may_refund_through_the_api(api, order, leaf, persona, status, code):
    response = api(persona, order, {"full": True, "reasonId": leaf.pk})
    assert response.status_code == status, response.content
    if code:
        assert _error(response)["code"] == code
        assert Refund.objects.count() == 0
    else:
        assert Refund.objects.get().amount_minor == 8900


def test_an_amount_as_a_json_number_is_read_exactly(api, order, leaf, members):
    # The seed's example: "amount": 15.00, sent as a number literal.
    raw = f'{{"amount": 15.00, "reasonId": "{leaf.pk}", "reason": "Scratched mug"}}'
    response = api("staff", order, raw)
    assert response.status_code == 201, response.content
    body = response.json()
    # The answer is given before execution (enqueued on commit): pending on the rail.
    assert (body["amount"], body["currency"], body["status"]) == ("15.00", "USD", "processing")
    assert body["decision"] == "approved" and body["message"].startswith("Sent to the rail")
    assert body["remaining"] == "74.00" and body["order_status"] == "PAID"
    assert body["origin"] == "staff" and body["requested_by"] == "staff@roasters.example"
    assert body["refund_reason"] == {
        "id": leaf.pk,
        "path": f"Product problem{PATH_SEPARATOR}Arrived broken",
        "label": "Arrived broken",
        "code": None,
    }
    assert body["note"] == "Scratched mug"
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "succeeded" and refund.provider_refund_id.startswith("mock_re_")
    refund.order.refresh_from_db()
    assert refund.order.status == "PARTIALLY_REFUNDED"


def test_a_percentage_and_a_full_refund(api, order, leaf):
    body = api("admin", order, {"percentage": 25, "reasonId": leaf.pk}).json()
    assert body["amount"] == "22.25"
    body = api("admin", order, {"percentage": "12.5", "reasonId": leaf.pk}).json()
    assert body["amount"] == "11.13"  # 11.125 rounded half up
    body = api("admin", order, {"full": True, "reasonId": leaf.pk}).json()
    assert body["amount"] == "55.62" and body["remaining"] == "0.00"
    order.refresh_from_db()
    assert order.status == "REFUNDED"


def test_an_amount_with_a_leading_or_trailing_dot_is_read_as_typed(api, order, leaf):
    """An amount of ".50" was a 400 saying to type it "with a dot for the decimals"."""
    assert api("staff", order, {"amount": ".50", "reasonId": leaf.pk}).json()["amount"] == "0.50"
    assert api("staff", order, {"amount": "10.", "reasonId": leaf.pk}).json()["amount"] == "10.00"


def test_an_amount_of_twenty_digits_is_too_large_naming_the_largest(api, order, leaf):
    """It was "is not a decimal amount: ... without thousands separators", for a number
    sent without them."""
    response = api("staff", order, f'{{"amount": 12345678901234567890, "reasonId": "{leaf.pk}"}}')
    assert response.status_code == 400
    error = _error(response)
    assert error["field"] == "amount"
    assert error["message"] == (
        "That amount is too large: USD amounts are at most $9,999,999,999,999,999.99"
    )
    assert not Refund.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": " "}, "amount"),
        ({"percentage": ""}, "percentage"),
        ({"percentage": "%"}, "percentage"),
    ],
)
def test_a_blank_amount_or_percentage_is_asked_for_as_in_the_form(api, order, leaf, body, field):
    """It was "'' is not a decimal amount: type it in digits ..."."""
    response = api("staff", order, {**body, "reasonId": leaf.pk})
    assert response.status_code == 400
    assert _error(response) == {
        "code": "invalid_field",
        "message": f"Enter the {field} to refund.",
        "field": field,
    }


def test_too_much_is_a_400_naming_the_maximum(api, order, leaf):
    api("staff", order, {"amount": "50.00", "reasonId": leaf.pk})
    response = api("staff", order, {"amount": "40.00", "reasonId": leaf.pk})
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "exceeds_refundable" and error["field"] == "amount"
    assert "At most $39.00 can be refunded" in error["message"]


def test_a_parent_or_inactive_reason_is_a_400(api, site, order, leaf):
    parent = RefundReason.objects.get(site=site, name="Product problem")
    response = api("staff", order, {"full": True, "reasonId": parent.pk})
    assert response.status_code == 400
    assert _error(response) | {"message": ""} == {
        "code": "reason_not_leaf",
        "field": "reasonId",
        "message": "",
    }
    set_reason_active(reason=leaf, actor=site_owner(leaf.site), active=False)
    response = api("staff", order, {"full": True, "reasonId": leaf.pk})
    assert response.status_code == 400
    assert _error(response)["code"] == "reason_inactive"
    assert Refund.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"reasonId": "1"}, "invalid_field", None),
        ({"amount": "5.00", "full": True, "reasonId": "1"}, "invalid_field", None),
        ({"amount": "5.00", "percentage": 5, "reasonId": "1"}, "invalid_field", None),
        ({"full": False, "reasonId": "1"}, "invalid_field", None),
        ({"amount": "1.001", "reasonId": "1"}, "invalid_field", "amount"),
        ({"amount": "0", "reasonId": "1"}, "invalid_field", "amount"),
        ({"amount": True, "reasonId": "1"}, "invalid_field", "amount"),
        ({"percentage": 150, "reasonId": "1"}, "invalid_field", "percentage"),
        ({"full": True}, "invalid_field", "reasonId"),
        ({"full": True, "reasonId": "abc"}, "invalid_field", "reasonId"),
        ('{"full": true, ', "malformed", None),
    ],
)
def test_bad_bodies_are_400s_with_the_field(api, order, leaf, body, code, field):
    if isinstance(body, dict) and body.get("reasonId") == "1":
        body = {**body, "reasonId": str(leaf.pk)}
    response = api("staff", order, body)
    assert response.status_code == 400, response.content
    error = _error(response)
    assert (error["code"], error["field"]) == (code, field)
    assert Refund.objects.count() == 0


@pytest.mark.parametrize("status", ["PENDING", "REFUNDED", "CANCELLED"])
def test_unrefundable_orders_are_a_409_with_the_reason(api, make_order, mock_rail, leaf, status):
    order = make_order(status=status)
    response = api("owner", order, {"full": True, "reasonId": leaf.pk})
    assert response.status_code == 409
    error = _error(response)
    assert (
        error["code"] == "order_not_refundable"
        and OrderStatus(status).label.lower() in error["message"]
    )


def test_expected_remaining_makes_a_retry_safe(api, order, leaf):
    body = {"amount": "10.00", "reasonId": leaf.pk, "expectedRemaining": "89.00"}
    assert api("staff", order, body).status_code == 201
    response = api("staff", order, body)
    assert response.status_code == 409
    assert _error(response)["code"] == "order_changed"
    assert Refund.objects.count() == 1


def test_session_auth_requires_the_csrf_token(
    members, order, leaf, django_capture_on_commit_callbacks
):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["staff"].user)
    body = json.dumps({"full": True, "reasonId": leaf.pk})
    url = f"/api/order/{order.id}/refund"
    response = client.post(url, data=body, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in _error(response)["message"]
    client.get(f"/orders/{order.id}/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            url, data=body, content_type="application/json", headers={"X-CSRFToken": token}
        )
    assert response.status_code == 201


def test_the_openapi_schema_describes_the_endpoint(admin_client):
    schema = admin_client.get("/api/schema/", headers={"Accept": "application/json"})
    assert schema.status_code == 200
    text = schema.content.decode()
    assert "/api/order/{order_id}/refund" in text and "reasonId" in text
