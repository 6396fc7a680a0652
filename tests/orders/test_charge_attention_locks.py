"""An owner's resolution of a charge that needs attention takes its locks in the order every
money path takes them: the order, then the charge, the site's audit chain head last.

The other transaction here holds the order, then appends to the site's audit chain, as a
refund of the order or a sync of it does. A resolution that appended first and asked for the
order after would deadlock with it, and the owner's form would answer a 500.
"""

from __future__ import annotations

import pytest

from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.models import Charge, Order
from tests.orders.in_doubt import charge_in_doubt
from tests.threads import run_while_a_writer_holds_then_appends

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_recording_a_charge_never_deadlocks_with_a_writer_of_the_same_order(
    make_order, agent, members, site
):
    in_doubt = charge_in_doubt(make_order(status="PENDING", charged=False, placed_by_agent=agent))
    resolved = run_while_a_writer_holds_then_appends(
        table="orders_order",
        row_id=in_doubt.order_id,
        site_id=site.pk,
        run=lambda: resolve_charge_attention(
            charge=in_doubt,
            actor=members["owner"].user,
            outcome="charged",
            provider_charge_id="mock_ch_seen",
        ),
    )
    assert isinstance(resolved, Charge), resolved
    assert resolved.status == "succeeded"
    assert Order.objects.get(pk=in_doubt.order_id).status == "PAID"
