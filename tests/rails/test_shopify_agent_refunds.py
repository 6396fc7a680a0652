"""Agent mandates on Shopify orders: named by ``original_order``, through the same pipeline.

Against the loopback store (tests/rails/shopify_stub.py) through the real ShopifyAPI client.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from refunds.models import Refund
from sill.orders.models import Charge, Order
from sill.rails.shopify.sync import sync_orders
from tests.conftest import site_owner
from tests.refunds.conftest import refund_intent

pytestmark = pytest.mark.django_db


def shopify_intent(order_id: str, **overrides: Any) -> dict[str, Any]:
    intent = refund_intent("unused", **overrides)
    del intent["original_mandate_id"]
    intent.setdefault("original_order", {"rail": "shopify", "id": order_id})
    return intent


@pytest.fixture
def synced(site, shopify, shopify_account):
    def make(**order: Any):
        placed = shopify.add_order(**order)
        sync_orders(site=site)
        return Order.objects.get(charges__provider_payment_id=str(placed.id)), placed

    return make


def test_a_full_agent_refund_of_a_shopify_order(site, shopify, synced, api, sign):
    order, placed = synced()
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["amount"], answer["rail"]) == (
        "approved",
        "89.00",
        "shopify",
    )
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", refund.failure_message
    assert refund.facts["refundReason"] == "none"  # a Shopify refund never carries one
    [create] = shopify.refund_creates()
    assert create["key"] == refund.idempotency_key
    assert str(placed.refunds[0]["amount"]) == "89.00"
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_a_capped_agent_refund_and_the_gid_form_of_the_id(site, shopify, synced, api, sign):
    order, placed = synced()
    intent = shopify_intent(placed.gid, max_amount=Decimal("30.00"))
    answer = api(sign(intent)).json()
    assert (answer["decision"], answer["amount"]) == ("approved", "30.00"), answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"
    assert str(placed.refunds[0]["amount"]) == "30.00"
    assert Order.objects.get(pk=order.pk).status == "PARTIALLY_REFUNDED"


@pytest.mark.parametrize("live", ["store", "order"])
def test_a_live_store_or_a_real_order_is_rejected_before_anything_moves(
    site, shopify, synced, api, sign, live
):
    order, placed = synced(test=live != "order")
    if live == "store":
        shopify.plan = {"partnerDevelopment": False, "publicDisplayName": "Basic"}
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "live_not_allowed"), answer
    assert shopify.refund_creates() == [] and not placed.refunds
    charge = Charge.objects.get(order=order)
    assert (charge.amount_reserved_minor, charge.amount_refunded_minor) == (0, 0)


def test_sill_allow_live_lets_the_agent_refund_a_real_order(
    site, shopify, synced, api, sign, settings
):
    settings.SILL_ALLOW_LIVE = True
    _order, placed = synced(test=False)
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert answer["decision"] == "approved", answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"


def test_an_order_of_another_store_or_site_is_not_found(site, shopify, synced, api, sign):
    synced()
    answer = api(sign(shopify_intent("123456789"))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "original_not_charged")
    assert shopify.refund_creates() == []


@pytest.mark.parametrize(
    ("original", "code", "field"),
    [
        ({"rail": "stripe", "id": "1"}, "invalid_field", "signed.intent.original_order.rail"),
        ({"rail": "shopify", "id": 450789469}, "invalid_field", "signed.intent.original_order.id"),
        ({"rail": "shopify", "id": "#1001"}, "invalid_field", "signed.intent.original_order.id"),
        ({"rail": "shopify"}, "invalid_field", "signed.intent.original_order.id"),
        (
            {"rail": "shopify", "id": "1", "shop": "x"},
            "unknown_field",
            "signed.intent.original_order.shop",
        ),
        ("450789469", "invalid_field", "signed.intent.original_order"),
        # Past a 64-bit integer: refused, never a database error.
        (
            {"rail": "woocommerce", "id": "9" * 19},
            "invalid_field",
            "signed.intent.original_order.id",
        ),
        ({"rail": "shopify", "id": "9" * 20}, "invalid_field", "signed.intent.original_order.id"),
    ],
)
def test_a_malformed_original_order_is_refused(site, api, sign, original, code, field):
    intent = shopify_intent("1")
    intent["original_order"] = original
    response = api(sign(intent))
    assert response.status_code == 422, response.content
    assert (response.json()["error"]["code"], response.json()["error"]["field"]) == (code, field)
    assert not Refund.objects.exists()


def test_naming_the_original_twice_or_not_at_all_is_refused(site, api, sign):
    both = refund_intent("mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN")
    both["original_order"] = {"rail": "shopify", "id": "1"}
    neither = shopify_intent("1")
    del neither["original_order"]
    for intent in (both, neither):
        response = api(sign(intent))
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "signed.intent.original_mandate_id"
    assert not Refund.objects.exists()


def test_when_the_store_cannot_say_it_is_a_test_nothing_moves(site, shopify, synced, api, sign):
    _order, placed = synced()
    shopify.http_500["SillChargeFacts"] = 10  # the facts read fails: live money is unknown
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "live_not_allowed"), answer
    assert shopify.refund_creates() == []


def test_when_shopify_throttles_the_facts_read_nothing_moves(site, shopify, synced, api, sign):
    """A throttled read is no fact: live money is unknown, and the refund is refused."""
    _order, placed = synced()
    shopify.throttle, shopify.throttle_wait = {"SillChargeFacts": 10}, 30.0
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "live_not_allowed"), answer
    assert shopify.refund_creates() == []


@pytest.mark.django_db(transaction=True)
def test_a_policy_replaced_while_the_rails_facts_are_read_decides_the_refund(
    site, shopify, synced, api, sign
):
    """The site's rules are read with the agent's key, before the rail's facts (network
    calls, seconds at worst) and the decision's transaction. A merchant who switched on a
    stricter version meanwhile (stopping a rogue agent, say) still saw the refund decided,
    and paid, by the version it replaced, its record after the policy change in the chain."""
    import json
    import threading

    from django.db import connection

    from audit.models import AuditRecord
    from policies.services import add_rule

    _order, placed = synced()
    owner = site_owner(site)  # before the decision starts: the rule is added as the owner
    entered, release = threading.Event(), threading.Event()
    shopify.pause["SillChargeFacts"] = (entered, release)
    answers: dict[str, Any] = {}

    def decide() -> None:
        try:
            answers["answer"] = api(sign(shopify_intent(str(placed.id)))).json()
        finally:
            connection.close()

    thread = threading.Thread(target=decide)
    thread.start()
    assert entered.wait(timeout=15), "the decision never read the rail's facts"
    label = add_rule(
        site=site,
        actor=owner,
        rule={"id": "stop-shopify", "when": {"rail": "shopify"}, "then": {"action": "deny"}},
    )[0]
    release.set()
    thread.join(timeout=60)
    answer = answers["answer"]
    assert (answer["decision"], answer["reason"]) == ("rejected", "policy_denied"), answer
    assert not Refund.objects.filter(status__in=["processing", "succeeded"]).exists()
    records = list(AuditRecord.objects.filter(site=site).order_by("seq"))
    change = next(r for r in records if r.kind == "policy_change")
    decision = next(r for r in records if r.kind == "rejected")
    assert decision.seq > change.seq
    assert json.loads(decision.payload)["body"]["policy_version"] == label
