"""Staff cannot refund a charge the buyer's bank is disputing (it would pay twice)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from refunds.models import Refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import NotRefundable, create_staff_refund
from sill.orders.models import Charge, Dispute

pytestmark = pytest.mark.django_db


def test_it_refuses_a_staff_refund_on_a_disputed_charge(site, members, make_order, mock_rail):
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=None, name="Goodwill")
    order = make_order(total="20.00")
    Dispute.objects.create(
        charge=Charge.objects.get(order=order), reason="fraudulent", amount_minor=2000,
        currency="USD", status="under_review", opened_at=timezone.now(),
    )  # fmt: skip
    with pytest.raises(NotRefundable, match="disputed"):
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )
    assert Refund.objects.count() == 0


def test_a_lost_dispute_still_blocks_the_bank_gave_the_money_back(
    site, members, make_order, mock_rail
):
    """The buyer won the chargeback: the bank already returned the charge to them, so a
    refund now would pay them twice."""
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=None, name="Goodwill")
    order = make_order(total="20.00")
    Dispute.objects.create(
        charge=Charge.objects.get(order=order), reason="fraudulent", amount_minor=2000,
        currency="USD", status="lost", opened_at=timezone.now(),
    )  # fmt: skip
    with pytest.raises(NotRefundable, match="already returned") as refused:
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )
    assert refused.value.__cause__.code == "disputed"
    assert Refund.objects.count() == 0


def test_a_closed_dispute_no_longer_blocks(
    site, members, make_order, mock_rail, django_capture_on_commit_callbacks
):
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=None, name="Goodwill")
    order = make_order(total="20.00")
    Dispute.objects.create(
        charge=Charge.objects.get(order=order), reason="fraudulent", amount_minor=2000,
        currency="USD", status="won", opened_at=timezone.now(),
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        refund = create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )
    refund.refresh_from_db()
    assert refund.status == "succeeded"
