"""A declined charge fails and cancels its order in one transaction, with its audit record."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from sill.orders.charging import ChargeRetry, charge_order
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


@pytest.fixture
def placed(sign, mock_rail, django_capture_on_commit_callbacks):
    """A purchase placed through the API whose charge task has not run yet."""
    mock_rail.config = {"charge": "decline"}
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=False):
        response = post(Client(), sign(purchase_intent()))
    assert response.status_code == 201, response.json()
    return Order.objects.get(pk=response.json()["order_id"])


def test_it_cancels_the_order_with_a_signed_charge_record(placed):
    assert charge_order(order_id=placed.pk) == "failed"

    placed.refresh_from_db()
    charge = Charge.objects.get(order=placed)
    assert (placed.status, charge.status) == ("CANCELLED", "failed")
    assert "declined" in charge.failure_message
    assert not MockLedgerEntry.objects.exists()
    (record,) = AuditRecord.objects.filter(site=placed.site, kind="charge")
    body = json.loads(record.payload)["body"]
    assert body["outcome"] == "failed" and body["code"] == "rail_declined"
    assert (body["order_id"], body["charge_id"]) == (placed.pk, charge.pk)
    assert (body["amount_minor"], body["currency"], body["rail"]) == (8900, "USD", "mock")
    assert body["mandate_id"] == placed.source_mandate_id
    call_command("audit", "verify", stdout=io.StringIO())


def test_a_failure_never_commits_without_the_cancellation(placed, settings):
    # The order moved on meanwhile and can no longer be cancelled: the charge's failure must
    # not be recorded on its own (a failed charge on a live order), nor its audit record.
    settings.SILL_CHARGE_MAX_ATTEMPTS = 2
    Order.objects.filter(pk=placed.pk).update(status="SHIPPED")

    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(charge_order(order_id=placed.pk))
            break
        except ChargeRetry:
            outcomes.append("retry")

    charge = Charge.objects.get(order=placed)
    assert charge.status == "pending" and charge.failure_message == ""
    assert not AuditRecord.objects.filter(kind="charge").exists()
    # Out of attempts with the outcome unresolved: a person looks, nothing is failed blindly.
    assert outcomes == ["retry", "needs_attention"]
    assert charge.needs_attention
    call_command("audit", "verify", stdout=io.StringIO())


def test_the_agent_asking_again_is_told_failed_charge_failed(
    sign, mock_rail, django_capture_on_commit_callbacks
):
    """The answer the README documents for a declined purchase: approved, then ``failed`` with
    ``charge_failed`` once the rail declined it."""
    mock_rail.config = {"charge": "decline"}
    mock_rail.save()
    body = sign(purchase_intent())
    with django_capture_on_commit_callbacks(execute=False):
        first = post(Client(), body)
    assert (first.status_code, first.json()["status"], first.json()["reason"]) == (
        201, "processing", None,
    )  # fmt: skip
    assert charge_order(order_id=first.json()["order_id"]) == "failed"
    again = post(Client(), body)  # the same mandate again: the answer as it stands now
    assert again.status_code == 200
    answer = again.json()
    assert (answer["decision"], answer["status"], answer["reason"]) == (
        "approved", "failed", "charge_failed",
    )  # fmt: skip
    assert answer["order_id"] == first.json()["order_id"]
