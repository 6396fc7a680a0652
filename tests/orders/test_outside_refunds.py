"""Refunds and disputes a rail reports from outside Sill, recorded on the charge."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.models import AuditRecord
from policies.decide import decide_refund
from policies.types import RefundContext
from refunds.staff.selectors import transactions_for
from sill.money import Money
from sill.orders.models import Charge, Dispute, DisputeStatus, ExternalRefund, Order
from sill.orders.outside import (
    OutsideRefund,
    ReportedDispute,
    record_dispute,
    record_outside_refund,
)
from sill.rails.registry import ensure_mock_rail

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def outside(amount: int, *, refund_id: str = "re_1", status: str = "succeeded") -> OutsideRefund:
    return OutsideRefund(
        provider_refund_id=refund_id,
        amount_minor=amount,
        currency="USD",
        status=status,
        created_at_rail=T0,
    )


@pytest.fixture
def charge(make_order) -> Charge:
    return Charge.objects.get(order=make_order(total="89.00", rail="stripe"))


def test_an_outside_refund_reduces_what_remains_and_marks_the_order(charge):
    done = record_outside_refund(charge=charge, refund=outside(3000), event_id="e1", event_at=T0)
    assert done == "external refund recorded"
    charge.refresh_from_db()
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (0, 3000)
    assert charge.remaining.amount_minor == 5900
    assert Order.objects.get(pk=charge.order_id).status == "PARTIALLY_REFUNDED"
    record_outside_refund(
        charge=charge,
        refund=outside(5900, refund_id="re_2"),
        event_id="e2",
        event_at=T0 + timedelta(seconds=1),
    )
    charge.refresh_from_db()
    assert charge.remaining.amount_minor == 0
    assert Order.objects.get(pk=charge.order_id).status == "REFUNDED"


def test_an_outside_refund_while_sill_holds_a_reservation(charge):
    # Sill reserved 6000 for a refund executing on the rail; meanwhile 5000 was refunded in
    # the dashboard. Both are facts: the constraint still holds and nothing remains until the
    # rail refuses Sill's refund (which releases the reservation).
    Charge.objects.filter(pk=charge.pk).update(amount_reserved_minor=6000)
    record_outside_refund(charge=charge, refund=outside(5000), event_id="e1", event_at=T0)
    charge.refresh_from_db()
    assert charge.remaining.amount_minor == 0
    Charge.objects.filter(pk=charge.pk).update(amount_reserved_minor=0)
    charge.refresh_from_db()
    assert charge.remaining.amount_minor == 3900


def test_the_database_refuses_more_refunded_than_charged(charge):
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_outside_minor=5000)
    with pytest.raises(IntegrityError), transaction.atomic():
        Charge.objects.filter(pk=charge.pk).update(amount_refunded_minor=4000)


def test_it_is_on_the_transactions_tab_and_signed(charge, client_for):
    record_outside_refund(charge=charge, refund=outside(3000), event_id="e1", event_at=T0)
    order = Order.objects.get(pk=charge.order_id)
    rows = [t for t in transactions_for(order) if t.kind == "external_refund"]
    assert [(r.amount.amount_minor, r.provider_id, r.who) for r in rows] == [
        (3000, "re_1", "outside Sill")
    ]
    body = client_for("staff").get(f"/orders/{order.pk}/", {"tab": "transactions"})
    assert "Refund outside Sill" in body.content.decode() and "re_1" in body.content.decode()
    assert AuditRecord.objects.filter(kind="external_refund").count() == 1
    out = io.StringIO()
    call_command("audit", "verify", "--site", order.site_id, stdout=out)


def test_a_replayed_or_older_event_changes_nothing(charge):
    record_outside_refund(charge=charge, refund=outside(3000), event_id="e1", event_at=T0)
    again = record_outside_refund(charge=charge, refund=outside(3000), event_id="e1", event_at=T0)
    older = record_outside_refund(
        charge=charge,
        refund=outside(3000, status="failed"),
        event_id="e0",
        event_at=T0 - timedelta(seconds=5),
    )
    assert again.startswith("unchanged") and older.startswith("unchanged")
    charge.refresh_from_db()
    assert charge.amount_refunded_outside_minor == 3000
    assert ExternalRefund.objects.get().status == "succeeded"


def test_a_dispute_is_recorded_and_its_close_updates_it(charge):
    reported = ReportedDispute(
        provider_dispute_id="dp_1",
        reason="fraudulent",
        amount_minor=8900,
        currency="USD",
        status=DisputeStatus.NEEDS_RESPONSE,
        rail_status="needs_response",
        opened_at=T0,
    )
    record_dispute(charge=charge, dispute=reported, event_id="d1", event_at=T0)
    lost = ReportedDispute(
        **{**reported.__dict__, "status": DisputeStatus.LOST, "rail_status": "lost"}
    )
    record_dispute(charge=charge, dispute=lost, event_id="d2", event_at=T0 + timedelta(days=9))
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.opened_at) == ("lost", T0)
    assert AuditRecord.objects.filter(kind="dispute").count() == 2


def test_the_policy_facts_count_an_outside_refund(site, make_order, agent):
    ensure_mock_rail(site)
    order = make_order(total="89.00", placed_by_agent=agent)
    charge = Charge.objects.get(order=order)
    record_outside_refund(charge=charge, refund=outside(4450), event_id="e1", event_at=T0)
    charge.refresh_from_db()
    context = RefundContext(
        site=site,
        order=order,
        charge=charge,
        amount=Money(4450, "USD"),
        origin="agent",
        agent=agent,
        user=None,
        reason="wrong_item",
        now=timezone.now(),
    )
    assert decide_refund(context).facts["refundFraction"] == {"num": 8900, "den": 8900}
