"""A refund's note in Shopify is the merchant's free text: only a note naming one of Sill's
refund ids (``sill-refund-rf_…``, what Sill writes) makes the refund Sill's own.

Seen before: a refund made in the Shopify admin whose note held ``sill-refund-`` with nothing
after it raised IndexError while the order was read, so its webhook failed on every attempt
(the order's refunds and disputes never recorded) and reconciliation could not read the
charge; and one naming something else after it (``sill-refund-42``) was taken for Sill's
refund "42", never counted as refunded outside Sill.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from sill.orders.models import Charge, ExternalRefund
from sill.rails.models import WebhookEvent
from tests.rails.test_shopify_reconciliation import synced, webhook  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "note", ["Exchange, see sill-refund-", "sill-refund- ", "sill-refund-42 (store credit)"]
)
def test_a_refund_whose_note_names_no_sill_refund_is_an_outside_refund(
    note,
    shopify,
    shopify_account,
    synced,  # noqa: F811
    webhook,  # noqa: F811
):
    placed, order = synced("60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note=note)
    webhook(placed, "orders/updated", f"wh-updated-{placed.id}")

    event = WebhookEvent.objects.get(event_id=f"wh-updated-{placed.id}")
    assert event.processed_at is not None and event.last_error == ""
    assert "1 outside refund(s)" in event.outcome
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert (outside.provider_refund_id, outside.counted_minor) == (made["id"], 2000)
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 2000
