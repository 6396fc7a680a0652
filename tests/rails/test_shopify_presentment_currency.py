"""A Shopify order the buyer paid in another currency than the shop's is refused when the
refund is decided, not when it executes.

A multi-currency store refunds such an order in the buyer's (presentment) currency, while Sill
keeps the shop's. The refund used to be answered ``approved`` (an agent) or opened (staff) and
only fail ``rail_declined`` at execution: the agent was told a refund that never came. The
order's ``presentmentCurrencyCode`` is now read with its charge facts and the quote refuses it
``currency_mismatch``, before anything is written or reserved; a currency that could not be
read refuses too. Against the loopback store (tests/rails/shopify_stub.py), which answers
``presentmentCurrencyCode`` only to a query that asks for it, through the real ShopifyAPI
client.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from sill.orders.models import Charge, Order
from sill.rails.base import RefundFactsRequest
from sill.rails.registry import rail_for
from sill.rails.shopify.sync import sync_orders
from tests.rails.test_shopify_agent_refunds import shopify_intent

pytestmark = pytest.mark.django_db


def _synced(site, shopify, *, paid_in: str | None = None) -> tuple[Order, object]:
    placed = shopify.add_order()
    placed.presentment_currency = paid_in
    sync_orders(site=site)
    return Order.objects.get(charges__provider_payment_id=str(placed.id)), placed


def _nothing_moved(shopify, placed, order: Order) -> None:
    assert shopify.refund_creates() == [] and not placed.refunds
    charge = Charge.objects.get(order=order)
    assert (charge.amount_reserved_minor, charge.amount_refunded_minor) == (0, 0)
    assert not Refund.objects.filter(status__in=["processing", "succeeded", "failed"]).exists()


def test_the_charge_facts_name_the_currency_the_buyer_paid_in(site, shopify, shopify_account):
    _order, placed = _synced(site, shopify, paid_in="EUR")
    facts = rail_for(site_id=site.pk, rail="shopify").read_refund_facts(
        RefundFactsRequest(
            provider_charge_id=placed.transactions[0]["id"],
            currency="USD",
            history_since=datetime.now(UTC) - timedelta(days=90),
        )
    )
    assert facts.presentment_currency == "EUR"
    [(_op, query, _vars)] = [r for r in shopify.requests if r[0] == "SillChargeFacts"]
    assert re.search(r"\bpresentmentCurrencyCode\b", query)


def test_an_agent_is_answered_rejected_not_approved(site, shopify, shopify_account, api, sign):
    order, placed = _synced(site, shopify, paid_in="EUR")
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "currency_mismatch"), answer
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("rejected", "currency_mismatch")
    _nothing_moved(shopify, placed, order)


def test_the_refund_page_says_why_in_full(site, shopify, shopify_account, api, sign, client_for):
    """The page showed only "The currencies do not match": the refusal's words (which
    currency, and to refund it in Shopify) were said to nobody. They are kept as the
    rejection's note, as a credit's rejection keeps its, and shown with the label."""
    order, placed = _synced(site, shopify, paid_in="EUR")
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.note.startswith(f"Order #{order.number} was paid in EUR at checkout")
    body = client_for("owner").get(f"/refunds/{refund.id}/").content.decode()
    body = body.replace("&#x27;", "'")
    outcome = re.search(r"<dt>Outcome</dt><dd>([^<]*)</dd>", body)
    assert outcome, body
    assert outcome.group(1) == (
        f"The currencies do not match: Order #{order.number} was paid in EUR at checkout, and "
        "Sill refunds Shopify orders only in the shop's currency (USD): refund it in Shopify. "
        "Nothing was refunded."
    )
    # The timeline says it under the decision, not as the agent's words under its mandate.
    assert body.count("was paid in EUR at checkout") == 2
    assert "“Order #" not in body


def test_an_order_paid_in_the_shops_currency_is_still_approved(
    site, shopify, shopify_account, api, sign
):
    """A store that sells in one currency: its presentment currency is the shop's."""
    _order, placed = _synced(site, shopify, paid_in="USD")
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert answer["decision"] == "approved", answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"
    assert str(placed.refunds[0]["amount"]) == "89.00"


def test_an_unread_currency_lets_no_money_out(site, shopify, shopify_account, api, sign, settings):
    """Live money allowed, so the failed facts read is not refused as live money: the currency
    the buyer paid in is unknown, and that refuses the refund as a known one would."""
    settings.SILL_ALLOW_LIVE = True
    order, placed = _synced(site, shopify, paid_in="EUR")
    shopify.http_500["SillChargeFacts"] = 10  # the facts read fails
    answer = api(sign(shopify_intent(str(placed.id)))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "currency_mismatch"), answer
    _nothing_moved(shopify, placed, order)


def _hidden(body: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', body)
    assert match, name
    return match.group(1)


def test_the_staff_refund_form_says_so_and_writes_nothing(
    site, shopify, shopify_account, client_for, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify, paid_in="EUR")
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    client = client_for("staff")
    page = client.get(f"/orders/{order.id}/").content.decode()
    names = ("idempotency_key", "expected_remaining_minor", "expected_refund_count")
    form = {name: _hidden(page, name) for name in names}
    form |= {"kind": "full", "reason": str(reason.pk), "confirmed": "1"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/orders/{order.id}/refund/", form)
    assert response.status_code == 422, response.status_code  # the form again, with why
    body = response.content.decode()
    assert "was paid in EUR at checkout" in body and "refund it in Shopify" in body
    assert not Refund.objects.exists()
    _nothing_moved(shopify, placed, order)
