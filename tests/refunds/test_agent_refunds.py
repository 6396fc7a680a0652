"""The agent refund pipeline through the API, with tasks run in-process on commit."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core import mail
from django.test import Client

from audit.models import AuditRecord
from refunds.models import Mandate, Refund
from sill.accounts import two_factor
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.conftest import site_owner
from tests.refunds.conftest import ORIGINAL, post, purchase_intent, refund_intent

pytestmark = pytest.mark.django_db


def test_it_refunds_a_purchase_end_to_end_on_the_mock_rail(api, sign, mock_rail):
    response = api(sign(purchase_intent()))
    assert response.status_code == 201, response.json()
    bought = response.json()
    # The answer is given before the charge task runs (on commit): processing.
    assert bought["status"] == "processing" and bought["amount"] == "89.00"
    order = Order.objects.get(pk=bought["order_id"])
    assert order.status == "PAID" and order.total_minor == 8900

    response = api(sign(refund_intent(bought["mandate_id"])))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["decision"] == "approved" and body["amount"] == "89.00"
    assert body["status"] == "processing"
    assert body["rail"] == "mock" and body["reason"] is None
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "succeeded" and refund.provider_refund_id.startswith("mock_re_")
    order.refresh_from_db()
    assert order.status == "REFUNDED"
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (8900, 0)
    kinds = list(AuditRecord.objects.filter(site=order.site).values_list("kind", flat=True))
    # The purchase's decision and charge are signed too, then the refund's.
    assert kinds == ["approved", "charge", "approved", "settlement"]
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert "$89.00" in mail.outbox[0].body


def test_it_caps_the_refund_at_max_amount(api, sign, original):
    body = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("30.5")))).json()
    assert body["amount"] == "30.50"
    original.refresh_from_db()
    assert original.status == "PARTIALLY_REFUNDED"
    assert Charge.objects.get(order=original).amount_refunded_minor == 3050


def test_it_refunds_whole_yen(api, sign, make_order, agent, mock_rail):
    make_order(total="4800", currency="JPY", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    body = api(sign(refund_intent(ORIGINAL, currency="JPY", max_amount=Decimal("1200")))).json()
    assert (body["amount"], body["currency"]) == ("1200", "JPY")
    assert Refund.objects.get().amount_minor == 1200


def test_it_refunds_three_decimal_currencies_exactly(api, sign, make_order, agent, mock_rail):
    make_order(total="10.125", currency="KWD", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    body = api(sign(refund_intent(ORIGINAL, currency="KWD", max_amount=Decimal("7.005")))).json()
    assert body["amount"] == "7.005"
    assert Refund.objects.get().amount_minor == 7005


def test_it_refunds_at_most_the_remaining_amount(api, sign, original):
    Charge.objects.filter(order=original).update(amount_refunded_minor=5000)
    body = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("89.00")))).json()
    assert body["amount"] == "39.00"


def test_an_identical_resend_makes_one_refund(api, sign, original):
    body = sign(refund_intent(ORIGINAL))
    first = api(body)
    assert first.status_code == 201
    for _ in range(2):
        again = api(body)
        assert again.status_code == 200
        assert again.json()["refund_id"] == first.json()["refund_id"]
    # Whitespace does not make it another mandate.
    pretty = json.dumps(json.loads(body), indent=2).encode()
    assert api(pretty).status_code == 200
    assert (
        Refund.objects.count() == 1 and MockLedgerEntry.objects.filter(kind="refund").count() == 1
    )


def test_an_identical_resend_answers_even_after_expiry(api, sign, original, time_machine):
    body = sign(refund_intent(ORIGINAL))
    first = api(body).json()
    time_machine.move_to("2030-01-01T00:00:00Z")
    again = api(body)
    assert again.status_code == 200 and again.json()["refund_id"] == first["refund_id"]


def test_the_same_mandate_id_with_another_body_conflicts(api, sign, original):
    body = sign(refund_intent(ORIGINAL), mandate_id="mnd_01K6HBK7MK753DH3YBX4NVCYTT")
    assert api(body).status_code == 201
    other = sign(
        refund_intent(ORIGINAL, reason_code="defective"),
        mandate_id="mnd_01K6HBK7MK753DH3YBX4NVCYTT",
    )
    response = api(other)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "mandate_conflict"


def test_a_reused_nonce_is_a_replay(api, sign, original):
    assert api(sign(refund_intent(ORIGINAL), nonce="nonce-used-once-0001")).status_code == 201
    response = api(sign(refund_intent(ORIGINAL), nonce="nonce-used-once-0001"))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "replay"
    assert Mandate.objects.count() == 1


def test_a_purchase_under_a_mandate_id_an_order_already_has_conflicts_not_a_replay(
    api, sign, original
):
    """``original`` names ORIGINAL as its source mandate with no Mandate row stored (as the
    demo's orders do): a purchase under that id with a fresh nonce is stored, then its order
    is refused by the order's unique source mandate, which is no nonce's reuse."""
    orders = Order.objects.count()
    response = api(sign(purchase_intent(), mandate_id=ORIGINAL, nonce="F" * 22))
    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("mandate_conflict", "signed.mandate_id")
    assert Mandate.objects.count() == 0 and Order.objects.count() == orders


def test_a_second_refund_of_an_order_is_already_executed(api, sign, original):
    api(sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00"))))
    body = api(sign(refund_intent(ORIGINAL))).json()
    assert (body["decision"], body["status"], body["reason"]) == (
        "rejected",
        "rejected",
        "already_executed",
    )
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


@pytest.mark.parametrize("case", ["unknown", "other_site", "pending", "uncharged"])
def test_it_refuses_an_original_that_was_not_charged(
    api, sign, make_order, other_site, agent, mock_rail, case
):
    if case == "other_site":
        make_order(on_site=other_site, source_mandate_id=ORIGINAL)
    elif case == "pending":
        make_order(status="PENDING", charged=False, source_mandate_id=ORIGINAL)
    elif case == "uncharged":
        make_order(charged=False, source_mandate_id=ORIGINAL)
    body = api(sign(refund_intent(ORIGINAL))).json()
    assert (body["decision"], body["reason"]) == ("rejected", "original_not_charged")
    assert MockLedgerEntry.objects.count() == 0
    assert AuditRecord.objects.get().kind == "rejected"


def test_it_refuses_line_item_scopes(api, sign, original):
    body = api(sign(refund_intent(ORIGINAL, scope=[{"sku": "SKU-1", "quantity": 1}]))).json()
    assert body["reason"] == "scope_unsupported"
    assert MockLedgerEntry.objects.count() == 0


def test_it_refuses_when_the_rail_is_disabled(api, sign, original, mock_rail):
    mock_rail.enabled = False
    mock_rail.save()
    body = api(sign(refund_intent(ORIGINAL))).json()
    assert body["reason"] == "rail_disabled"
    assert MockLedgerEntry.objects.count() == 0


def test_a_currency_other_than_the_orders_is_invalid(api, sign, original):
    response = api(sign(refund_intent(ORIGINAL, currency="EUR", max_amount=Decimal("10.00"))))
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_field",
        "message": "the original order is in USD, not EUR",
        "field": "signed.intent.currency",
    }
    assert Mandate.objects.count() == 0 and Refund.objects.count() == 0


def test_a_declined_refund_fails_and_releases_the_reservation(api, sign, original, mock_rail):
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    body = api(sign(refund_intent(ORIGINAL))).json()
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "failed" and refund.outcome_code
    charge = Charge.objects.get(order=original)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 0)
    original.refresh_from_db()
    assert original.status == "PAID"


def test_the_agent_reads_its_refund_with_a_bearer_token(api, sign, original, agent):
    from sill.accounts.services import issue_agent_token

    body = api(sign(refund_intent(ORIGINAL))).json()
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )
    client = Client()
    response = client.get(
        f"/api/v1/refunds/{body['mandate_id']}", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"
    assert response.json()["refund_id"] == body["refund_id"]
    bad = client.get(
        f"/api/v1/refunds/{body['mandate_id']}", headers={"Authorization": "Bearer nope"}
    )
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "not_authenticated"
    missing = client.get(f"/api/v1/refunds/{body['mandate_id']}")
    assert missing.status_code == 401
    unknown = client.get("/api/v1/refunds/mnd_nope", headers={"Authorization": f"Bearer {token}"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_another_agents_token_cannot_read_the_refund(api, sign, original, site):
    from sill.accounts.models import Agent
    from sill.accounts.services import issue_agent_token

    body = api(sign(refund_intent(ORIGINAL))).json()
    other = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other", refund_enabled=True
    )
    token = issue_agent_token(
        agent=other, actor=site_owner(other.site), second_factor=two_factor.OPERATOR
    )
    response = Client().get(
        f"/api/v1/refunds/{body['mandate_id']}", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 404


def test_the_openapi_schema_describes_the_mandate_endpoint(admin_client):
    response = admin_client.get("/api/schema/", headers={"Accept": "application/json"})
    assert response.status_code == 200
    assert b"/api/v1/mandates" in response.content and b"request_refund" in response.content


def test_the_openapi_schema_lists_every_status_and_error_status_the_endpoint_answers(
    admin_client,
):
    schema = admin_client.get("/api/schema/", headers={"Accept": "application/json"}).json()
    status = schema["components"]["schemas"]["MandateResult"]["properties"]["status"]
    enum_ref = status.get("$ref") or (status.get("allOf") or [{}])[0].get("$ref")
    enum = status.get("enum") or schema["components"]["schemas"][enum_ref.split("/")[-1]]["enum"]
    # DESIGN.md, "Agent API contract".
    assert set(enum) == {
        "held", "processing", "needs_attention", "succeeded", "failed", "rejected", "expired",
    }  # fmt: skip
    responses = schema["paths"]["/api/v1/mandates"]["post"]["responses"]
    assert {"429", "503"} <= responses.keys()  # rate_limited, busy


@pytest.mark.parametrize("script", ["timeout_after_effect", "timeout", "rate_limited"])
def test_an_ambiguous_or_retryable_rail_answer_is_retried_with_the_same_key(
    sign, original, mock_rail, script, django_capture_on_commit_callbacks
):
    """The first call fails (after the rail acted, for timeout_after_effect); one refund results.

    The task's retry is Celery's; here each attempt is run as the worker would run it.
    """
    from refunds.execution import execute_refund
    from sill.rails.base import RailError

    mock_rail.config = {"refund": script, "fail_times": 1}
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=False):
        body = post(Client(), sign(refund_intent(ORIGINAL))).json()
    with pytest.raises(RailError) as first:
        execute_refund(body["refund_id"])
    assert first.value.retryable
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "processing" and refund.lease_until is None
    assert execute_refund(body["refund_id"]) == "succeeded"
    refund.refresh_from_db()
    assert refund.status == "succeeded" and refund.attempts == 2
    entries = MockLedgerEntry.objects.filter(kind="refund")
    assert entries.count() == 1
    assert entries.get().idempotency_key == f"sill-refund-{refund.id}"
    assert refund.provider_refund_id == entries.get().provider_id
    assert Charge.objects.get(order=original).amount_refunded_minor == 8900


def test_an_unsigned_body_under_a_known_mandate_id_is_a_bad_signature_not_a_conflict(
    api, sign, original
):
    from nacl.signing import SigningKey

    mandate_id = "mnd_01K6HBK7MK753DH3YBX4NVCYTT"
    assert api(sign(refund_intent(ORIGINAL), mandate_id=mandate_id)).status_code == 201
    forged = sign(
        refund_intent(ORIGINAL, reason_code="other"),
        mandate_id=mandate_id,
        key=SigningKey(bytes(32)),
    )
    response = api(forged)
    assert response.status_code == 401 and response.json()["error"]["code"] == "bad_signature"


def test_a_dispute_opened_before_execution_stops_the_refund(
    sign, original, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from refunds.execution import execute_refund
    from sill.orders.models import Dispute

    with django_capture_on_commit_callbacks(execute=False):
        body = post(Client(), sign(refund_intent(ORIGINAL))).json()
    charge = Charge.objects.get(order=original)
    Dispute.objects.create(
        charge=charge, reason="fraudulent", amount_minor=8900, currency="USD",
        status="needs_response", opened_at=timezone.now(),
    )  # fmt: skip
    assert execute_refund(body["refund_id"]) == "failed"
    refund = Refund.objects.get(pk=body["refund_id"])
    assert (refund.status, refund.outcome_code) == ("failed", "disputed")
    charge.refresh_from_db()
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 0)
    assert MockLedgerEntry.objects.count() == 0


def test_a_disputed_charge_is_refused_before_anything_moves(api, sign, original):
    from django.utils import timezone

    from sill.orders.models import Dispute

    Dispute.objects.create(
        charge=Charge.objects.get(order=original), reason="product_not_received",
        amount_minor=8900, currency="USD", status="needs_response", opened_at=timezone.now(),
    )  # fmt: skip
    body = api(sign(refund_intent(ORIGINAL))).json()
    assert (body["decision"], body["reason"]) == ("rejected", "disputed")
    assert MockLedgerEntry.objects.count() == 0
    assert Charge.objects.get(order=original).amount_reserved_minor == 0
