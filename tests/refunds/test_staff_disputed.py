"""Staff cannot refund a charge the buyer's bank is disputing, or has taken back through a
lost dispute (either way a refund would pay the buyer twice); a won dispute no longer blocks."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from refunds.models import Refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import NotRefundable, create_staff_refund
from sill.orders.models import Charge, Dispute
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def refund_disputed(site, members, make_order, mock_rail):
    """``refund_disputed(status)``: a staff full refund of a $20.00 order whose charge has a
    dispute in ``status``."""
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=site_owner(site), name="Goodwill")

    def refund(status: str) -> Refund:
        order = make_order(total="20.00")
        Dispute.objects.create(
            charge=Charge.objects.get(order=order), reason="fraudulent", amount_minor=2000,
            currency="USD", status=status, opened_at=timezone.now(),
        )  # fmt: skip
        return create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )

    return refund


@pytest.mark.parametrize(
    ("status", "words"),
    [
        ("under_review", "disputed: the bank is already reversing it"),
        # The buyer won the chargeback: the bank already gave them the money back.
        ("lost", "already returned $20.00 of this charge to the buyer (a dispute, fraudulent,"),
    ],
)
def test_an_open_or_lost_dispute_refuses_a_staff_refund(refund_disputed, status, words):
    with pytest.raises(NotRefundable, match=re.escape(words)) as refused:
        refund_disputed(status)
    assert refused.value.__cause__.code == "disputed"
    assert Refund.objects.count() == 0


def test_a_won_dispute_no_longer_blocks(refund_disputed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        refund = refund_disputed("won")
    refund.refresh_from_db()
    assert refund.status == "succeeded"
