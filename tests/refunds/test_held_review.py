"""Deciding held refunds: approve executes as the pipeline does, reject sends nothing."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from audit.models import AuditRecord
from audit.selectors import chain_verification
from refunds.models import Refund
from refunds.review.decisions import (
    AlreadyDecided,
    DecisionRefused,
    RequesterCannotApprove,
    approve_refund,
    reject_refund,
)
from sill.orders.models import Charge, Dispute
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    """Run a decision and its on-commit tasks (execution) as a request would."""

    def run(service, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return service(**kwargs)

    return run


def body(record: AuditRecord) -> dict:
    return json.loads(record.payload)["body"]


def test_it_approves_executes_and_links_the_records(decide, held, members, original):
    escalated = AuditRecord.objects.get(kind="escalated")
    admin = members["admin"].user
    decide(approve_refund, refund=held, actor=admin, note="Customer sent photos")

    held.refresh_from_db()
    assert (held.status, held.decision) == ("succeeded", "approved")
    assert held.decided_by == admin and held.review_note == "Customer sent photos"
    approved = AuditRecord.objects.get(kind="escalated_approved")
    assert body(approved)["reviewer"] == "admin@roasters.example"
    assert body(approved)["escalated_hash"] == escalated.hash
    assert body(approved)["note"] == "Customer sent photos"
    assert body(approved)["rules"] == [
        {"id": "r07", "action": "require_approval", "mode": "enforced"}
    ]
    # The settlement links the refunded amount to the approval, not to the hold.
    settlement = AuditRecord.objects.get(kind="settlement")
    assert body(settlement)["decision_hash"] == approved.hash == held.decision_hash
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    charge = Charge.objects.get(order=original)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (8900, 0)
    original.refresh_from_db()
    assert original.status == "REFUNDED"
    assert chain_verification(held.site).ok


def test_it_rejects_without_touching_the_rail(decide, held, members, original):
    decide(reject_refund, refund=held, actor=members["owner"].user, note="Looks like abuse")
    held.refresh_from_db()
    assert (held.status, held.decision, held.outcome_code) == (
        "rejected",
        "rejected",
        "rejected_by_reviewer",
    )
    record = AuditRecord.objects.get(kind="escalated_rejected")
    assert body(record)["reviewer"] == "owner@roasters.example"
    assert body(record)["reason"] == "rejected_by_reviewer"
    assert body(record)["note"] == "Looks like abuse"
    assert held.decision_hash == record.hash
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    charge = Charge.objects.get(order=original)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 0)


def test_the_requester_can_never_approve(decide, members, original):
    admin = members["admin"].user
    refund = hold_refund(order=original, requested_by=admin, reason_label="Damaged in transit")
    with pytest.raises(RequesterCannotApprove) as info:
        decide(approve_refund, refund=refund, actor=admin)
    assert info.value.status == 403
    refund.refresh_from_db()
    assert refund.status == "held"
    assert not AuditRecord.objects.filter(kind="escalated_approved").exists()
    # Someone else may; and the requester may withdraw their own request.
    decide(approve_refund, refund=refund, actor=members["owner"].user)
    refund.refresh_from_db()
    assert refund.status == "succeeded"


def test_the_requester_may_withdraw_by_rejecting(decide, members, original):
    admin = members["admin"].user
    refund = hold_refund(order=original, requested_by=admin)
    decide(reject_refund, refund=refund, actor=admin)
    refund.refresh_from_db()
    assert refund.status == "rejected"


@pytest.mark.parametrize("first", [approve_refund, reject_refund])
@pytest.mark.parametrize("second", [approve_refund, reject_refund])
def test_a_second_decision_is_told_it_was_already_decided(decide, held, members, first, second):
    decide(first, refund=held, actor=members["owner"].user)
    with pytest.raises(AlreadyDecided) as info:
        decide(second, refund=held, actor=members["admin"].user)
    assert info.value.status == 409
    assert "Nothing changed: owner@roasters.example had already" in info.value.message
    decisions = AuditRecord.objects.filter(kind__in=["escalated_approved", "escalated_rejected"])
    assert decisions.count() == 1


def test_an_approval_is_refused_when_a_dispute_opened_since(decide, held, members, original):
    Dispute.objects.create(
        charge=Charge.objects.get(order=original),
        reason="fraudulent",
        amount_minor=8900,
        currency="USD",
        status="needs_response",
        opened_at=timezone.now(),
    )
    with pytest.raises(DecisionRefused) as info:
        decide(approve_refund, refund=held, actor=members["admin"].user)
    assert info.value.code == "disputed"
    assert "dispute" in info.value.message
    held.refresh_from_db()
    assert (held.status, held.decision, held.outcome_code) == ("rejected", "rejected", "disputed")
    assert body(AuditRecord.objects.get(kind="escalated_rejected"))["reason"] == "disputed"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0


def test_a_closed_dispute_does_not_block_the_approval(decide, held, members, original):
    Dispute.objects.create(
        charge=Charge.objects.get(order=original),
        reason="fraudulent",
        amount_minor=8900,
        currency="USD",
        status="won",
        opened_at=timezone.now(),
    )
    decide(approve_refund, refund=held, actor=members["admin"].user)
    held.refresh_from_db()
    assert held.status == "succeeded"


def test_an_approval_is_refused_when_less_remains_refundable(decide, held, members, original):
    # A refund made in the Stripe dashboard since the hold, reported by the rail.
    Charge.objects.filter(order=original).update(amount_refunded_minor=5000)
    with pytest.raises(DecisionRefused) as info:
        decide(approve_refund, refund=held, actor=members["admin"].user)
    assert info.value.code == "exceeds_refundable"
    assert "$39.00" in info.value.message
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "exceeds_refundable")
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    charge = Charge.objects.get(order=original)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (5000, 0)


def test_an_approval_that_the_rail_declines_fails_and_releases(decide, held, members, mock_rail):
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    decide(approve_refund, refund=held, actor=members["admin"].user)
    held.refresh_from_db()
    assert held.status == "failed"
    charge = Charge.objects.get(pk=held.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (0, 0)


def test_a_staff_refund_held_for_review_is_approved_the_same_way(decide, members, original):
    refund = hold_refund(
        order=original,
        requested_by=members["staff"].user,
        amount_minor=2500,
        reason_code="",
        reason_label="Damaged in transit",
    )
    decide(approve_refund, refund=refund, actor=members["owner"].user)
    refund.refresh_from_db()
    assert refund.status == "succeeded"
    assert Charge.objects.get(order=original).amount_refunded_minor == 2500
    assert Refund.objects.get(pk=refund.pk).decision == "approved"
