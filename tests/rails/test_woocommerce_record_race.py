"""The refund's record on the Woo order is written once, even when two attempts meet.

An attempt takes the record's row lock only to count itself, then writes on the store outside
any lock (a network call). WooCommerce has no idempotency key: a second attempt that ran while
the first was still writing (the beat task that had listed the record as due, a task message
delivered again) found no refund on the order yet and wrote another, so the Woo order showed
the refund twice. An attempt now goes ahead only when the record is due: a first attempt, or
one whose time (set when the previous attempt began or ended) has come.
"""

from __future__ import annotations

import threading

import pytest

from sill.rails.woocommerce.models import WooRecordState, WooRefundRecord
from sill.rails.woocommerce.record import attempt_record
from tests.rails.test_woocommerce_refunds import woo_paid  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_attempt_while_the_first_is_still_writing_writes_nothing(
    site,
    woo,
    woo_paid,  # noqa: F811
):
    order, placed, _charge = woo_paid
    WooRefundRecord.objects.create(
        refund_id="rf_raced", site=site, order=order, amount_minor=1000, currency="USD"
    )
    writing = threading.Event()
    woo.hold_next_refund_post = writing
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(attempt_record(refund_id="rf_raced")))
    first.start()
    try:
        for _ in range(200):  # until the first attempt's POST reached the store
            if woo.hold_next_refund_post is None:
                break
            threading.Event().wait(0.05)
        assert woo.hold_next_refund_post is None, "the first attempt never wrote"

        second = attempt_record(refund_id="rf_raced")  # the beat task, meanwhile
    finally:
        writing.set()
        first.join(15)

    assert second.state != WooRecordState.RECORDED
    assert [r.state for r in results] == [WooRecordState.RECORDED]  # type: ignore[attr-defined]
    assert len(placed.refunds) == 1 and len(woo.refund_posts) == 1
    record = WooRefundRecord.objects.get(refund_id="rf_raced")
    assert (record.state, record.attempts) == (WooRecordState.RECORDED, 1)
