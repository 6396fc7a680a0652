"""``Idempotency-Key`` on ``POST /api/order/{order_id}/refund``: replay, conflict, in flight,
scope per site and member, expiry, and which answers a key keeps."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from refunds.models import IdempotencyRecord, Refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.idempotency import request_fingerprint
from refunds.staff.services import create_staff_refund
from sill.accounts import two_factor
from sill.accounts.services import add_member, issue_member_token
from sill.money import Money
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from sill.rails.registry import ensure_mock_rail
from sill.rails.services import set_rail_enabled
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db

KEY = "3f0c9a52-6d1e-4f7b-9a57-1c2d3e4f5a6b"


def _leaf(site):
    ensure_default_reasons(site)
    product = add_reason(site=site, actor=site_owner(site), name="Product problem")
    return add_reason(site=site, actor=site_owner(site), name="Arrived broken", parent=product)


@pytest.fixture
def leaf(site):
    return _leaf(site)


@pytest.fixture
def api(client_for, django_capture_on_commit_callbacks):
    """``api(persona or client, order, body, key=...)`` → response (body: dict or raw text)."""

    def send(who, order, body, *, key: str | None = KEY, headers: dict | None = None):
        client = client_for(who) if isinstance(who, str) else who
        text = body if isinstance(body, str) else json.dumps(body)
        sent = {**({} if key is None else {"Idempotency-Key": key}), **(headers or {})}
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                f"/api/order/{order.id}/refund",
                data=text,
                content_type="application/json",
                headers=sent,
            )

    return send


def _refunded(order) -> int:
    return Charge.objects.get(order=order).amount_refunded_minor


def _error(response) -> dict:
    return response.json()["error"]


def test_it_replays_the_stored_response_and_refunds_once(api, order, leaf):
    first = api("staff", order, {"amount": "10.00", "reasonId": leaf.pk})
    # The same body with other whitespace and key order: the fingerprint is of the parsed body.
    again = api("staff", order, f'{{ "reasonId" : {leaf.pk},\n  "amount": "10.00" }}')

    assert first.status_code == again.status_code == 201, first.content
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Refund.objects.count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert _refunded(order) == 1000


def test_it_refuses_the_same_key_with_another_body_and_changes_nothing(api, order, leaf):
    first = api("staff", order, {"amount": "10.00", "reasonId": leaf.pk})
    record = IdempotencyRecord.objects.get()

    other = api("staff", order, {"amount": "20.00", "reasonId": leaf.pk})

    assert other.status_code == 422
    assert _error(other)["code"] == "idempotency_conflict"
    assert "Idempotent-Replayed" not in other
    assert Refund.objects.count() == 1 and _refunded(order) == 1000
    after = IdempotencyRecord.objects.get()
    assert (after.fingerprint, after.response_body) == (record.fingerprint, record.response_body)
    # The stored answer is still there for the original body.
    assert api("staff", order, {"amount": "10.00", "reasonId": leaf.pk}).content == first.content


def test_it_refuses_the_same_key_and_body_on_another_order(api, make_order, order, leaf):
    other_order = make_order(total="20.00")
    assert api("staff", order, {"full": True, "reasonId": leaf.pk}).status_code == 201
    response = api("staff", other_order, {"full": True, "reasonId": leaf.pk})
    assert response.status_code == 422 and _error(response)["code"] == "idempotency_conflict"
    assert _refunded(other_order) == 0


def _in_flight(site, user, order, body, *, seconds_ago: int, refund=None) -> IdempotencyRecord:
    now = timezone.now()
    claimed = now - timedelta(seconds=seconds_ago)
    return IdempotencyRecord.objects.create(
        site=site,
        user=user,
        key=KEY,
        fingerprint=request_fingerprint(
            method="POST", path=f"/api/order/{order.id}/refund", body=body
        ),
        state="in_flight",
        claim_token="a" * 32,
        claimed_at=claimed,
        created_at=claimed,
        expires_at=claimed + timedelta(hours=24),
        refund=refund,
    )


def test_it_answers_409_while_a_request_with_the_key_is_in_flight(api, site, order, leaf, members):
    body = {"full": True, "reasonId": leaf.pk}
    _in_flight(site, members["staff"].user, order, body, seconds_ago=5)

    response = api("staff", order, body)

    assert response.status_code == 409
    assert _error(response)["code"] == "idempotency_in_flight"
    assert Refund.objects.count() == 0
    assert IdempotencyRecord.objects.get().state == "in_flight"


def test_it_takes_over_a_key_abandoned_before_anything_was_made(api, site, order, leaf, members):
    body = {"full": True, "reasonId": leaf.pk}
    _in_flight(site, members["staff"].user, order, body, seconds_ago=61)

    response = api("staff", order, body)

    assert response.status_code == 201, response.content
    assert "Idempotent-Replayed" not in response
    record = IdempotencyRecord.objects.get()
    assert record.state == "done" and record.refund_id == response.json()["refund_id"]
    assert Refund.objects.count() == 1 and _refunded(order) == 8900


def test_it_answers_the_refund_of_a_request_that_died_after_making_it(
    api, site, order, leaf, members, time_machine
):
    staff = members["staff"].user
    body = {"amount": "5.00", "reasonId": leaf.pk}
    record = _in_flight(site, staff, order, body, seconds_ago=0)
    # The request made its refund (the link commits with it) and died before storing an answer.
    made = create_staff_refund(
        site=site,
        order=order,
        actor=staff,
        kind="amount",
        amount=Money(500, "USD"),
        reason=leaf,
        on_opened=lambda refund: IdempotencyRecord.objects.filter(pk=record.pk).update(
            refund=refund
        ),
    )

    assert api("staff", order, body).status_code == 409  # it may still be finishing
    time_machine.move_to(timezone.now() + timedelta(seconds=61), tick=False)
    response = api("staff", order, body)

    assert response.status_code == 201, response.content
    assert response["Idempotent-Replayed"] == "true"
    assert response.json()["refund_id"] == made.pk
    assert Refund.objects.count() == 1
    assert api("staff", order, body).content == response.content


def test_it_keeps_keys_per_member(api, order, leaf):
    body = {"amount": "10.00", "reasonId": leaf.pk}
    mine = api("staff", order, body)
    theirs = api("admin", order, body)
    theirs_other_body = api("owner", order, {"amount": "3.00", "reasonId": leaf.pk})

    assert [r.status_code for r in (mine, theirs, theirs_other_body)] == [201, 201, 201]
    assert all("Idempotent-Replayed" not in r for r in (mine, theirs, theirs_other_body))
    assert Refund.objects.count() == 3 and _refunded(order) == 2300


def test_it_keeps_keys_per_site(api, site, other_site, members, make_order, order, leaf):
    admin = members["admin"]
    elsewhere = add_member(site=other_site, email=admin.user.email, role="admin")
    ensure_mock_rail(other_site)
    their_leaf = _leaf(other_site)
    their_order = make_order(total="89.00", on_site=other_site)

    def send(membership, target, reason):
        token = issue_member_token(
            membership=membership, actor=None, system=True, second_factor=two_factor.OPERATOR
        )
        return api(
            Client(),
            target,
            {"full": True, "reasonId": reason.pk},
            headers={"Authorization": f"Bearer {token}"},
        )

    here = send(admin, order, leaf)
    there = send(elsewhere, their_order, their_leaf)

    assert (here.status_code, there.status_code) == (201, 201), there.content
    assert "Idempotent-Replayed" not in there
    assert _refunded(order) == _refunded(their_order) == 8900
    assert IdempotencyRecord.objects.filter(key=KEY, user=admin.user).count() == 2


def test_it_keeps_a_key_24_hours_then_forgets_it(api, order, leaf, time_machine):
    start = timezone.now()
    time_machine.move_to(start, tick=False)
    first = api("staff", order, {"amount": "10.00", "reasonId": leaf.pk})
    api("admin", order, {"amount": "1.00", "reasonId": leaf.pk}, key="admin-key")

    time_machine.move_to(start + timedelta(hours=23, minutes=59), tick=False)
    replay = api("staff", order, {"amount": "10.00", "reasonId": leaf.pk})
    assert replay.content == first.content and replay["Idempotent-Replayed"] == "true"

    # Kept for 24 hours after it was answered; then the key is free again.
    time_machine.move_to(start + timedelta(hours=24, seconds=1), tick=False)
    fresh = api("staff", order, {"amount": "20.00", "reasonId": leaf.pk})

    assert fresh.status_code == 201 and "Idempotent-Replayed" not in fresh
    assert Refund.objects.count() == 3 and _refunded(order) == 3100
    # The expired records went with the claim: the new one, and nothing of the admin's.
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == [KEY]


@pytest.mark.parametrize(
    "key", ["", "k" * 256, "tab\there", "bell\x07", "del\x7f", "schlüssel", "ключ"]
)
def test_it_refuses_a_malformed_key_before_anything_happens(api, order, leaf, key):
    response = api("staff", order, {"full": True, "reasonId": leaf.pk}, key=key)

    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_field"
    assert _error(response)["field"] == "Idempotency-Key"
    assert Refund.objects.count() == 0 and IdempotencyRecord.objects.count() == 0


def test_it_takes_a_key_of_255_printable_characters(api, order, leaf):
    key = ("Key with spaces ~!@#" * 13)[:255]
    response = api("staff", order, {"full": True, "reasonId": leaf.pk}, key=key)
    assert response.status_code == 201, response.content
    assert IdempotencyRecord.objects.get().key == key


def test_it_replays_a_refusal_the_pipeline_gave(api, order, leaf):
    first = api("staff", order, {"amount": "100.00", "reasonId": leaf.pk})
    assert first.status_code == 400 and _error(first)["code"] == "exceeds_refundable"

    again = api("staff", order, {"amount": "100.00", "reasonId": leaf.pk})

    assert again.status_code == 400 and again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert Refund.objects.count() == 0


def test_it_releases_the_key_when_the_rail_is_off(api, site, order, leaf, members):
    body = {"full": True, "reasonId": leaf.pk}
    set_rail_enabled(
        site=site,
        actor=members["owner"].user,
        rail="mock",
        enabled=False,
        second_factor=two_factor.OPERATOR,
    )
    off = api("staff", order, body)
    assert off.status_code == 409 and _error(off)["code"] == "rail_disabled"
    assert IdempotencyRecord.objects.count() == 0

    set_rail_enabled(
        site=site,
        actor=members["owner"].user,
        rail="mock",
        enabled=True,
        second_factor=two_factor.OPERATOR,
    )
    on = api("staff", order, body)

    assert on.status_code == 201 and "Idempotent-Replayed" not in on
    assert _refunded(order) == 8900


def test_it_stores_nothing_for_a_body_its_own_validation_refuses(api, order, leaf):
    bad = api("staff", order, {"reasonId": leaf.pk})
    assert bad.status_code == 400 and _error(bad)["code"] == "invalid_field"
    malformed = api("staff", order, '{"full": true,')
    assert malformed.status_code == 400 and _error(malformed)["code"] == "malformed"
    assert IdempotencyRecord.objects.count() == 0

    fixed = api("staff", order, {"full": True, "reasonId": leaf.pk})
    assert fixed.status_code == 201 and "Idempotent-Replayed" not in fixed


def test_it_works_as_before_without_a_key(api, order, leaf):
    body = {"amount": "10.00", "reasonId": leaf.pk}
    assert [api("staff", order, body, key=None).status_code for _ in range(2)] == [201, 201]
    assert Refund.objects.count() == 2 and IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize(("persona", "status"), [("reviewer", 403), ("outsider", 404)])
def test_it_checks_access_before_claiming_a_key(api, order, leaf, persona, status):
    response = api(persona, order, {"full": True, "reasonId": leaf.pk})
    assert response.status_code == status
    assert IdempotencyRecord.objects.count() == 0


def test_the_openapi_schema_documents_the_key(admin_client):
    schema = admin_client.get("/api/schema/", headers={"Accept": "application/json"}).json()
    operation = schema["paths"]["/api/order/{order_id}/refund"]["post"]
    header = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
    assert header["in"] == "header" and not header.get("required", False)
    assert {"409", "422"} <= set(operation["responses"])
    assert "idempotency_conflict" in operation["responses"]["422"]["description"]
    assert "idempotency_in_flight" in operation["responses"]["409"]["description"]
    assert "Idempotent-Replayed" in operation["responses"]["201"]["headers"]
