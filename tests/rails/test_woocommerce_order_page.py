"""The order page of a WooCommerce order says whether each refund was recorded on the Woo
order (``woocommerce_records_for``), in words, and why not when it was not."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sill.rails.woocommerce.models import WooOrderLink, WooRecordState, WooRefundRecord
from sill.rails.woocommerce.record import READ_ONLY_WORDS

pytestmark = pytest.mark.django_db


@pytest.fixture
def woo_order(site, make_order):
    order = make_order(total="89.00", rail="stripe")
    WooOrderLink.objects.create(site=site, order=order, woo_order_id=1001)
    return order


def _record(order, refund_id: str, **fields) -> WooRefundRecord:
    return WooRefundRecord.objects.create(
        site_id=order.site_id,
        order=order,
        refund_id=refund_id,
        amount_minor=fields.pop("amount_minor", 2000),
        currency="USD",
        **fields,
    )


def test_it_says_recorded_or_not_and_why(client_for, woo_order):
    _record(woo_order, "rf_1", state=WooRecordState.RECORDED, woo_refund_id="501")
    _record(
        woo_order,
        "rf_2",
        amount_minor=1500,
        state=WooRecordState.NOT_UPDATED,
        last_error=READ_ONLY_WORDS.format(code="woocommerce_rest_cannot_create"),
    )
    body = client_for("staff").get(f"/orders/{woo_order.pk}/").content.decode()
    assert "Recorded on the WooCommerce order (its refund #501)" in body
    assert (
        "Not recorded on the WooCommerce order: The store&#x27;s REST API keys are read-only "
        "(woocommerce_rest_cannot_create)"
    ) in body
    assert "Sill retries every 15 minutes." in body and "$15.00" in body


def test_an_order_not_from_woocommerce_shows_no_such_block(client_for, make_order):
    order = make_order(total="89.00")
    body = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    assert "WooCommerce order" not in body


def test_another_sites_records_are_not_shown(client_for, woo_order, other_site):
    _record(woo_order, "rf_3", state=WooRecordState.RECORDED)
    assert client_for("outsider").get(f"/orders/{woo_order.pk}/").status_code == 404


def test_the_block_costs_one_query_however_many_records(
    client_for, woo_order, django_assert_num_queries
):
    client = client_for("staff")
    _record(woo_order, "rf_4", state=WooRecordState.RECORDED)
    client.get(f"/orders/{woo_order.pk}/")
    with CaptureQueriesContext(connection) as one:
        client.get(f"/orders/{woo_order.pk}/")
    for n in range(5, 10):
        _record(woo_order, f"rf_{n}", state=WooRecordState.PENDING)
    with django_assert_num_queries(len(one.captured_queries)):
        body = client.get(f"/orders/{woo_order.pk}/").content.decode()
    assert body.count('class="woo-record ') == 6
