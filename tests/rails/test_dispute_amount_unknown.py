"""A dispute whose amount Sill cannot read is recorded all the same, its amount unknown.

A dispute is recorded so that refunds of its charge are refused: the buyer's bank is taking
the money back, and a refund would pay the buyer twice. Seen before: a PayPal dispute whose
``dispute_amount`` Sill could not read (missing, not a number, negative, past what a signed
record holds, another shape) was left out by its webhook ("malformed dispute") and by the
sync (logged, skipped), and so was a Stripe dispute event's; a Stripe dispute list holding one
raised, and recorded none of the charge's disputes. Refunds of the disputed charge went
through. Now each is recorded with its amount null (and no currency), refuses refunds like any
dispute, and the order page, the refusal and the signed record say the amount is not known.

PayPal through its loopback stub (tests/rails/paypal_stub.py), Stripe's events as Stripe
signs them (tests/rails/stripe_events.py) and its lists through a loopback Stripe driven by the
real SDK (tests/rails/stripe_events_stub.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditRecord
from refunds.models import ReconciliationItem, Refund
from refunds.quote import RefundRefused, quote_refund
from refunds.reconcile.inbox import catch_up_charge
from refunds.reconcile.runs import run_reconciliation
from refunds.staff.services import NotRefundable
from sill.orders.models import Charge, Dispute, Order
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.registry import rail_from_account
from tests.rails.paypal_stub import PayPalStub
from tests.rails.stripe_events import deliverer, dispute_obj, event, stripe_account
from tests.rails.stripe_events_stub import EventsStub, serving_events_stub
from tests.rails.test_paypal_refunds import _refund
from tests.rails.test_paypal_webhooks import (
    deliver,
    dispute_event,
    own_counters,  # noqa: F401 (autouse)
)
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

# A PayPal dispute's ``dispute_amount`` as Sill cannot read it (None: the key is absent).
PAYPAL_UNREADABLE: dict[str, Any] = {
    "missing": None,
    "not-a-number": {"currency_code": "USD", "value": "eighty-nine"},
    "past-the-currencys-digits": {"currency_code": "USD", "value": "89.001"},
    "negative": {"currency_code": "USD", "value": "-89.00"},
    "past-signed-records": {"currency_code": "USD", "value": "90071992547409.92"},  # 2**53 ¢
    "no-currency": {"value": "89.00"},
    "not-a-currency": {"currency_code": "DOLLARS", "value": "89.00"},
    "a-string": "89.00 USD",
}

# A Stripe dispute's ``amount`` and ``currency`` as Sill cannot read them (absent: None).
STRIPE_UNREADABLE: dict[str, tuple[Any, Any]] = {
    "missing": (None, "usd"),
    "null": ("null", "usd"),
    "a-string": ("8900", "usd"),
    "a-fraction": (89.5, "usd"),
    "true": (True, "usd"),
    "negative": (-100, "usd"),
    "past-signed-records": (2**53, "usd"),
    "no-currency": (8900, None),
    "not-a-currency": (8900, "dollars"),
}


def paypal_dispute_of(paypal: PayPalStub, capture, amount: Any) -> dict[str, Any]:
    """A dispute of ``capture`` whose ``dispute_amount`` is ``amount``, as PayPal holds it."""
    listed = paypal.add_dispute(capture, status="OPEN")
    listed.pop("dispute_amount")
    if amount is not None:
        listed["dispute_amount"] = amount
    paypal.put_dispute(listed)
    return listed


def stripe_dispute_of(charge: Charge, dispute_id: str, amount: Any, currency: Any) -> dict:
    obj: dict[str, Any] = dispute_obj(charge.provider_charge_id, dispute_id=dispute_id)
    for key, value in (("amount", amount), ("currency", currency)):
        obj.pop(key)
        if value == "null":
            obj[key] = None
        elif value is not None:
            obj[key] = value
    return obj


def assert_recorded_amount_unknown(charge: Charge, dispute_id: str) -> None:
    """The dispute is on the charge, open, its amount unknown, and its signed record says so;
    a refund of the charge is refused as disputed."""
    dispute = Dispute.objects.get(charge=charge, provider_dispute_id=dispute_id)
    assert (dispute.amount_minor, dispute.currency, dispute.amount) == (None, "", None)
    assert dispute.status == "needs_response"
    [record] = [
        body
        for r in AuditRecord.objects.filter(kind="dispute")
        if (body := json.loads(r.payload)["body"])["provider_dispute_id"] == dispute_id
    ]
    assert (record["amount_minor"], record["currency"]) == (None, None)
    charge = Charge.objects.select_related("order").get(pk=charge.pk)
    with pytest.raises(RefundRefused) as refused:
        quote_refund(order=charge.order, charge=charge)
    assert refused.value.code == "disputed"


# --- PayPal -----------------------------------------------------------------------------------


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    """``run(site, paypal, event)``: PayPal delivers ``event``; it is processed (eagerly)."""

    def send(*args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return deliver(*args, **kwargs)

    return send


@pytest.mark.parametrize("amount", PAYPAL_UNREADABLE.values(), ids=PAYPAL_UNREADABLE.keys())
def test_a_paypal_dispute_of_an_unreadable_amount_is_recorded_by_its_webhook(
    site, paypal, paypal_account, paypal_order, run, amount
):
    order, capture = paypal_order()
    event = dispute_event(paypal, capture, held=False)
    event["resource"].pop("dispute_amount")
    if amount is not None:
        event["resource"]["dispute_amount"] = amount
    paypal.put_dispute(event["resource"])
    assert run(site, paypal, event).status_code == 200
    stored = WebhookEvent.objects.get(site=site, rail="paypal")
    assert stored.processed_at is not None and stored.last_error == ""
    assert stored.outcome == "PP-D-27803: dispute recorded, its amount not known"
    assert_recorded_amount_unknown(order.charges.get(), "PP-D-27803")


@pytest.mark.parametrize("amount", PAYPAL_UNREADABLE.values(), ids=PAYPAL_UNREADABLE.keys())
def test_a_paypal_dispute_of_an_unreadable_amount_is_recorded_by_the_sync(
    site, paypal, paypal_account, paypal_order, amount
):
    order, capture = paypal_order()
    unreadable = paypal_dispute_of(paypal, capture, amount)
    readable = paypal.add_dispute(capture, status="OPEN")
    charge = order.charges.get()
    assert catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="t")
    assert_recorded_amount_unknown(charge, unreadable["dispute_id"])
    assert Dispute.objects.get(provider_dispute_id=readable["dispute_id"]).amount_minor == 8900
    # Its reconciliation item says the amount is not known, never "nothing" at PayPal.
    item = ReconciliationItem.objects.get(key=f"missing_in_sill:{unreadable['dispute_id']}")
    assert (item.rail_amount_minor, item.rail_currency, item.rail_status) == (None, "", "OPEN")
    assert "PayPal did not give its amount in a form Sill can read" in item.detail
    assert "another currency" not in item.detail


def test_a_later_report_of_an_unreadable_amount_keeps_the_amount_sill_knew(
    site, paypal, paypal_account, paypal_order, run
):
    # The dispute's new state is recorded; the amount read before is not forgotten for it.
    order, capture = paypal_order()
    run(site, paypal, dispute_event(paypal, capture))  # $89.00, open
    update = dispute_event(
        paypal, capture, kind="UPDATED", status="WAITING_FOR_BUYER_RESPONSE", held=False
    )
    update["resource"]["dispute_amount"] = {"currency_code": "USD", "value": "eighty-nine"}
    paypal.put_dispute(update["resource"])
    run(site, paypal, update)
    dispute = Dispute.objects.get(charge__order=order)
    assert (dispute.status, dispute.amount_minor, dispute.currency) == (
        "under_review", 8900, "USD",
    )  # fmt: skip
    *_, record = AuditRecord.objects.filter(kind="dispute").order_by("seq")
    assert json.loads(record.payload)["body"]["amount_minor"] == 8900


@pytest.fixture
def agent_paypal_order(make_order, agent, paypal: PayPalStub):
    """The agent's $89.00 order (the seed's purchase mandate), paid by a PayPal capture."""
    capture = paypal.add_capture(amount="89.00")
    order = make_order(rail="paypal", placed_by_agent=agent, source_mandate_id=ORIGINAL, days_ago=3)
    Charge.objects.filter(order=order).update(
        provider_charge_id=capture.id, provider_payment_id=capture.order_id
    )
    return order, capture


@pytest.mark.parametrize("reported_by", ["webhook", "sync"])
def test_a_refund_of_a_charge_disputed_for_an_unknown_amount_is_refused(
    site, members, paypal, paypal_account, agent_paypal_order, run, sign, agent_key,
    django_capture_on_commit_callbacks, client_for, reported_by,
):  # fmt: skip
    order, capture = agent_paypal_order
    if reported_by == "webhook":
        event = dispute_event(paypal, capture, held=False)
        event["resource"]["dispute_amount"] = {"currency_code": "USD", "value": "-89.00"}
        paypal.put_dispute(event["resource"])
        run(site, paypal, event)
    else:
        paypal_dispute_of(paypal, capture, {"currency_code": "USD", "value": "eighty-nine"})
        run_reconciliation(account_id=paypal_account.pk, force=True)
    assert Dispute.objects.get(charge__order=order).amount_minor is None

    # The agent's mandate: refused before anything moves.
    body = sign(refund_intent(ORIGINAL, max_amount=Decimal("89.00")))
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(Client(), body).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "disputed"), answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "rejected"
    # The staff form's refund: refused too.
    with pytest.raises(NotRefundable, match="is disputed") as refused:
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refused.value.__cause__.code == "disputed"
    assert paypal.refund_calls == [] and capture.refunds == []
    assert Charge.objects.get(order=order).amount_reserved_minor == 0
    # The order page says the dispute's amount is not known.
    page = client_for("owner").get(f"/orders/{order.pk}/").content.decode()
    assert "Dispute · Merchandise or service not received · amount not known · Needs response" in (
        page
    )
    if reported_by == "sync":
        # So does its Reconciliation item, on PayPal's side (not "nothing").
        inbox = client_for("owner").get("/reconcile/").content.decode()
        assert '<dd><span class="muted">amount not known</span> · Needs response</dd>' in inbox


def test_a_lost_dispute_of_an_unknown_amount_refuses_in_words_that_say_so(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    event = dispute_event(
        paypal, capture, kind="RESOLVED", status="RESOLVED", outcome="RESOLVED_BUYER_FAVOUR",
        held=False,
    )  # fmt: skip
    event["resource"].pop("dispute_amount")
    paypal.put_dispute(event["resource"])
    run(site, paypal, event)
    assert Dispute.objects.get(charge__order=order).status == "lost"
    with pytest.raises(NotRefundable) as refused:
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refused.value.message == (
        "The buyer's bank already returned money of this charge to the buyer (a dispute, "
        "merchandise or service not received, was lost; its amount is not known): a refund "
        "would pay the buyer twice."
    )


# --- Stripe -----------------------------------------------------------------------------------


@pytest.fixture
def events_stub() -> Iterator[EventsStub]:
    with serving_events_stub() as stub:
        yield stub


@pytest.fixture
def stripe_charge(site, make_order, events_stub: EventsStub) -> Charge:
    stripe_account(site, api_base=events_stub.url)
    return Charge.objects.get(order=make_order(total="89.00", rail="stripe"))


@pytest.mark.parametrize(
    ("amount", "currency"), STRIPE_UNREADABLE.values(), ids=STRIPE_UNREADABLE.keys()
)
def test_a_stripe_dispute_of_an_unreadable_amount_is_recorded_by_its_event(
    site, stripe_charge, django_capture_on_commit_callbacks, amount, currency
):
    obj = stripe_dispute_of(stripe_charge, "dp_unreadable", amount, currency)
    deliver = deliverer(django_capture_on_commit_callbacks)
    assert deliver(site, event("charge.dispute.created", obj, event_id="evt_d")).status_code == 200
    stored = WebhookEvent.objects.get()
    assert stored.processed_at is not None and stored.last_error == ""
    assert stored.outcome == "dp_unreadable: dispute recorded, its amount not known"
    assert_recorded_amount_unknown(stripe_charge, "dp_unreadable")


@pytest.mark.parametrize(
    ("amount", "currency"), STRIPE_UNREADABLE.values(), ids=STRIPE_UNREADABLE.keys()
)
def test_a_stripe_dispute_of_an_unreadable_amount_is_recorded_by_the_sync(
    site, stripe_charge, events_stub: EventsStub, amount, currency
):
    # Listed before a readable one: it raised (TypeError, AttributeError) or failed to record,
    # and the readable one after it was never recorded either.
    events_stub.disputes += [
        stripe_dispute_of(stripe_charge, "dp_unreadable", amount, currency),
        dispute_obj(stripe_charge.provider_charge_id, dispute_id="dp_readable"),
    ]
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert catch_up_charge(charge=stripe_charge, rail=rail_from_account(account), event_id="t")
    assert_recorded_amount_unknown(stripe_charge, "dp_unreadable")
    assert Dispute.objects.get(provider_dispute_id="dp_readable").amount_minor == 8900


def test_a_stripe_dispute_of_an_unreadable_amount_refuses_the_staff_refund(
    site, members, stripe_charge, django_capture_on_commit_callbacks
):
    obj = stripe_dispute_of(stripe_charge, "dp_unreadable", None, "usd")
    deliverer(django_capture_on_commit_callbacks)(
        site, event("charge.dispute.created", obj, event_id="evt_d")
    )
    order = Order.objects.get(pk=stripe_charge.order_id)
    with pytest.raises(NotRefundable, match="is disputed") as refused:
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refused.value.__cause__.code == "disputed"
    assert Refund.objects.count() == 0
