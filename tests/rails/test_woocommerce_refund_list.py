"""An attempt that may have written the record before looks for it among all the Woo order's
refunds, not the first page of them.

Seen before: the lookup read ``GET orders/{id}/refunds`` once. WooCommerce lists 10 refunds a
page unless asked for more, newest first, so on an order refunded ten more times since the
earlier attempt wrote its record (the answer lost), the record was not on the page, the
attempt found none and wrote another: the Woo order showed the refund twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from sill.rails.woocommerce.models import WooRecordState, WooRefundRecord
from sill.rails.woocommerce.record import attempt_record
from tests.rails.test_woocommerce_refunds import woo_paid  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def _written(placed, *, refund_id: int, reason: str, days_ago: int) -> None:
    when = datetime.now(UTC) - timedelta(days=days_ago)
    placed.refunds.append(
        {"id": refund_id, "date_created_gmt": when.strftime("%Y-%m-%dT%H:%M:%S"),
         "amount": "1.00", "reason": reason, "refunded_payment": False, "line_items": []}
    )  # fmt: skip


def test_a_record_written_before_ten_later_refunds_is_found_not_written_again(
    site,
    woo,
    woo_paid,  # noqa: F811
):
    order, placed, _charge = woo_paid
    # The earlier attempt wrote it, and its answer was lost; ten refunds came after it.
    _written(placed, refund_id=401, reason="Defective (Sill refund rf_lost)", days_ago=2)
    for i in range(10):
        _written(placed, refund_id=402 + i, reason="in the Woo admin", days_ago=1)
    WooRefundRecord.objects.create(
        refund_id="rf_lost", site=site, order=order, amount_minor=100, currency="USD",
        attempts=1, next_attempt_at=timezone.now() - timedelta(minutes=1),
    )  # fmt: skip

    result = attempt_record(refund_id="rf_lost")

    assert (result.state, result.woo_refund_id) == (WooRecordState.RECORDED, "401")
    assert woo.refund_posts == [] and len(placed.refunds) == 11
