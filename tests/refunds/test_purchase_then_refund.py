"""An agent buys, then refunds what it bought: sends at once, and refunds asked for before the
purchase's money was taken (or after the rail declined it)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client

from refunds.models import Mandate, Refund
from sill.orders.charging import charge_order
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import post, purchase_intent, refund_intent
from tests.threads import run_concurrently

pytestmark = pytest.mark.django_db


def _status(response: Any) -> int:
    assert not isinstance(response, Exception), response
    return response.status_code


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_purchase_sent_four_times_at_once_is_one_order_charged_once(sign, mock_rail):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's concurrent writers")
    body = sign(purchase_intent())
    answers = run_concurrently(4, lambda _: post(Client(), body))

    assert sorted(map(_status, answers)) == [200, 200, 200, 201]
    assert len({a.json()["order_id"] for a in answers}) == 1  # type: ignore[union-attr]
    assert (Mandate.objects.count(), Order.objects.count(), Charge.objects.count()) == (1, 1, 1)
    # The winner's charge ran on its commit (tasks run eagerly here); the resends enqueued none.
    assert Order.objects.get().status == "PAID"
    assert charge_order(order_id=Order.objects.get().pk) == "done"
    assert MockLedgerEntry.objects.filter(kind="charge").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_purchases_sharing_a_nonce_at_once_place_one_order_the_rest_are_replays(sign, mock_rail):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's concurrent writers")
    bodies = [sign(purchase_intent(), nonce="shared-nonce-0001") for _ in range(4)]
    answers = run_concurrently(4, lambda i: post(Client(), bodies[i]))

    assert sorted(map(_status, answers)) == [201, 409, 409, 409]
    codes = {a.json()["error"]["code"] for a in answers if a.status_code == 409}  # type: ignore[union-attr]
    assert codes == {"replay"}
    assert (Mandate.objects.count(), Order.objects.count(), Charge.objects.count()) == (1, 1, 1)


def _bought(sign, django_capture_on_commit_callbacks) -> dict[str, Any]:
    """A purchase answered "processing": its charge task has not run."""
    with django_capture_on_commit_callbacks(execute=False):
        bought = post(Client(), sign(purchase_intent()))
    assert bought.status_code == 201 and bought.json()["status"] == "processing"
    return bought.json()


def test_a_refund_before_the_charge_is_taken_refunds_nothing_and_a_later_one_does(
    sign, mock_rail, django_capture_on_commit_callbacks
):
    bought = _bought(sign, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        early = post(Client(), sign(refund_intent(bought["mandate_id"])))
    assert early.status_code == 201
    assert (early.json()["decision"], early.json()["reason"], early.json()["amount"]) == (
        "rejected", "original_not_charged", "0.00",
    )  # fmt: skip
    charge = Charge.objects.get(order_id=bought["order_id"])
    assert (charge.status, charge.amount_reserved_minor) == ("pending", 0)

    assert charge_order(order_id=bought["order_id"]) == "succeeded"
    # The early refusal is no refund of the order: one asked for now is made.
    with django_capture_on_commit_callbacks(execute=True):
        later = post(Client(), sign(refund_intent(bought["mandate_id"])))
    assert (later.json()["decision"], later.json()["amount"]) == ("approved", "89.00")
    assert Refund.objects.get(pk=later.json()["refund_id"]).status == "succeeded"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_refund_of_a_purchase_the_rail_declined_refunds_nothing(
    sign, mock_rail, django_capture_on_commit_callbacks
):
    mock_rail.config = {"charge": "decline"}
    mock_rail.save()
    bought = _bought(sign, django_capture_on_commit_callbacks)
    assert charge_order(order_id=bought["order_id"]) == "failed"

    with django_capture_on_commit_callbacks(execute=True):
        asked = post(Client(), sign(refund_intent(bought["mandate_id"])))
    assert (asked.json()["decision"], asked.json()["reason"]) == (
        "rejected",
        "original_not_charged",
    )
    assert not MockLedgerEntry.objects.exists()
