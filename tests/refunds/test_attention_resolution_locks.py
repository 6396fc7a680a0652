"""An owner's resolution of a refund that needs attention takes its row locks in the order
every refund path takes them: the money rows first, the site's audit chain head last.

The other transaction here does what a staff refund or a settlement of another refund of the
same order does: it holds the charge, then appends to the site's audit chain. A resolution
that appended first and asked for the charge after would deadlock with it, and the owner's
form would answer a 500.
"""

from __future__ import annotations

import pytest

from refunds.models import Refund
from refunds.reconcile.attention import resolve_attention
from sill.orders.models import Charge
from tests.threads import run_while_a_writer_holds_then_appends

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def in_doubt(make_order, mock_rail, staff_refund, settings):
    """A $30.00 staff refund that needs attention: its amount is reserved on the charge."""
    order = make_order(total="30.00")
    mock_rail.config = {"refund": "timeout", "fail_times": 1}
    mock_rail.save()
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1  # the timeout leaves it in doubt at once
    refund = staff_refund(order)  # executed on commit (a transactional test)
    refund = Refund.objects.select_related("site").get(pk=refund.pk)
    assert refund.status == "needs_attention"
    return refund


def test_recording_no_refund_never_deadlocks_with_a_refund_of_the_same_charge(
    in_doubt, members, site
):
    resolved = run_while_a_writer_holds_then_appends(
        table="orders_charge",
        row_id=in_doubt.charge_id,
        site_id=site.pk,
        run=lambda: resolve_attention(
            refund=in_doubt, actor=members["owner"].user, outcome="not_refunded"
        ),
    )
    assert isinstance(resolved, Refund), resolved
    assert (resolved.status, resolved.outcome_code) == ("failed", "not_at_rail")
    assert Charge.objects.get(pk=in_doubt.charge_id).amount_reserved_minor == 0
