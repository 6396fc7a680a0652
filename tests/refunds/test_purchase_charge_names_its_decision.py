"""A purchase's ``charge`` record names the decision it follows from (``decision_hash``): the
signed approval of the agent's purchase mandate, and nothing else Sill approved about the order.

Seen: the charge named the order's first ``approved`` record that named no refund, whatever it
approved; an approval about the order that is not the purchase's (none is written today, but
nothing kept one out) would have been named as the decision the money was taken on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditRecord
from audit.services import append_record
from sill.accounts.models import Agent
from sill.orders.charging import charge_order
from sill.orders.models import Charge, Order
from sill.rails.models import RailAccount
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


def charge_body(order_id: str) -> dict[str, Any]:
    [record] = AuditRecord.objects.filter(subject_order_id=order_id, kind="charge")
    return json.loads(record.payload)["body"]


def approved_about(order: Order) -> AuditRecord:
    """An approval naming the order and no refund that is not a purchase's decision."""
    return append_record(
        site=order.site,
        kind="approved",
        body={"kind": "refund", "order_id": order.pk, "amount_minor": 100, "currency": "USD"},
    )


def test_it_names_no_decision_when_the_order_has_no_purchase_decision(
    make_order: Callable[..., Order], agent: Agent, mock_rail: RailAccount
) -> None:
    # Placed before purchases were signed: its charge has no decision to name, and another
    # approval about the order is not one.
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_old"
    )
    Charge.objects.create(
        order=order,
        rail="mock",
        amount_minor=order.total_minor,
        currency=order.currency,
        payment_method="pm_card_visa",
    )
    approved_about(order)
    assert charge_order(order_id=order.pk) == "succeeded"
    assert charge_body(order.pk)["decision_hash"] is None


def test_it_names_the_purchases_approval_and_not_another(
    sign: Callable[..., bytes], mock_rail: RailAccount, django_capture_on_commit_callbacks: Any
) -> None:
    body = sign(purchase_intent(payment={"rail": "mock", "payment_method": "pm_visa"}))
    with django_capture_on_commit_callbacks(execute=False):
        response = post(Client(), body)
    assert response.status_code == 201, response.json()
    order = Order.objects.get(pk=response.json()["order_id"])
    [decision] = AuditRecord.objects.filter(subject_order_id=order.pk, kind="approved")
    approved_about(order)
    assert charge_order(order_id=order.pk) == "succeeded"
    assert charge_body(order.pk)["decision_hash"] == decision.hash
