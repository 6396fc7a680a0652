"""A charge whose answer was lost is recovered by asking the rail: one charge at the rail."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from sill.orders.charging import ChargeRetry, charge_order
from sill.orders.models import Charge, Order
from sill.rails.models import MockCallCount, MockLedgerEntry
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


@pytest.fixture
def buy(sign, django_capture_on_commit_callbacks):
    """Place a purchase through the API, then run the charge task's attempts as the worker
    would (Celery's retry between them); returns the order and each attempt's outcome."""

    def run() -> tuple[Order, list[str]]:
        with django_capture_on_commit_callbacks(execute=False):
            response = post(Client(), sign(purchase_intent()))
        assert response.status_code == 201, response.json()
        order = Order.objects.get(pk=response.json()["order_id"])
        outcomes = []
        for _ in range(10):
            try:
                outcomes.append(charge_order(order_id=order.pk))
                break
            except ChargeRetry:
                outcomes.append("retry")
        return order, outcomes

    return run


def script(account, **config) -> None:
    account.config = config
    account.save()


def charge_records(order: Order) -> list[dict]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=order.site, kind="charge").order_by("seq")
    ]


def assert_audit_verifies() -> None:
    call_command("audit", "verify", stdout=io.StringIO())


def test_it_recovers_a_timeout_with_one_charge_at_the_rail(buy, mock_rail):
    script(mock_rail, charge="timeout", fail_times=1)

    order, outcomes = buy()

    assert outcomes == ["retry", "succeeded"]
    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    assert (order.status, charge.status, charge.attempts) == ("PAID", "succeeded", 2)
    entries = MockLedgerEntry.objects.filter(kind="charge")
    assert entries.count() == 1
    assert charge.provider_payment_id == entries.get().provider_id
    assert [b["outcome"] for b in charge_records(order)] == ["succeeded"]
    assert_audit_verifies()


def test_it_finds_a_charge_whose_answer_was_lost_instead_of_charging_again(buy, mock_rail):
    # Every charge call records the charge and then loses the answer: only a lookup by the
    # idempotency key can settle it, and it must not call charge a second time.
    script(mock_rail, charge="timeout_after_effect", fail_times=5)

    order, outcomes = buy()

    assert outcomes == ["retry", "succeeded"]
    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    assert (order.status, charge.status) == ("PAID", "succeeded")
    entry = MockLedgerEntry.objects.get(kind="charge")
    assert entry.idempotency_key == f"sill-charge-{order.pk}"
    assert MockCallCount.objects.get(idempotency_key=entry.idempotency_key).calls == 1
    (body,) = charge_records(order)
    decision = AuditRecord.objects.get(site=order.site, kind="approved")
    assert body == {
        "decision_hash": decision.hash,  # what Sill decided, signed before the first attempt
        "order_id": order.pk,
        "order_number": order.number,
        "charge_id": charge.pk,
        "mandate_id": order.source_mandate_id,
        "amount_minor": 8900,
        "currency": "USD",
        "rail": "mock",
        "payment_account": "",  # the mock rail names none
        "provider_payment_id": entry.provider_id,
        "provider_charge_id": entry.provider_charge_id,
        "rail_status": "",
        "outcome": "succeeded",
        "code": "",
        "message": "",
        "attempts": 2,
    }
    assert_audit_verifies()
