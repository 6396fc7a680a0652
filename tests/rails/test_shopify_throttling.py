"""Shopify's rate limit is never a decline and never ends a sync.

Shopify limits an app by query cost: over budget, it answers HTTP 200 with a ``THROTTLED``
error and ``extensions.cost.throttleStatus`` (older answers: ``{"message": "Throttled"}``
alone), or HTTP 429 with ``Retry-After``. A throttled request did nothing, a throttled
``refundCreate`` included: the refund is tried again under the same key, the sync reads on
from where it was.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.rails.base import CannotLookUp, PermanentRailError, RefundRequest
from sill.rails.shopify.rail import LISTS_MAX
from sill.rails.shopify.sync import shopify_rail_for, sync_orders
from tests.rails.test_shopify_refunds import _execute, _refund, _synced

pytestmark = pytest.mark.django_db


# --- writes: the refund ------------------------------------------------------------------------


def test_a_throttled_refund_in_the_older_shape_is_retried_never_declined(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    """``{"errors": [{"message": "Throttled"}]}`` with no code was read as any GraphQL error:
    the refund failed ``rail_declined`` and its amount was released, though Shopify did
    nothing and refunds it when asked again."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    shopify.throttle, shopify.throttle_without_code = {"SillRefundCreate": 1}, True
    refund = _execute(refund, tries=1)
    assert (refund.status, refund.outcome_code) == ("succeeded", "")
    assert len(shopify.refund_creates()) == 2 and len(placed.refunds) == 1


def test_a_429_on_the_refund_with_a_long_retry_after_keeps_it_reserved_for_the_retry(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    shopify.http_429, shopify.http_429_retry_after = {"SillRefundCreate": 1}, "30"
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.code == "rail_throttled"
    # Not sooner than Shopify asked: the jittered backoff alone would retry within seconds,
    # throttled again, spending an attempt each time.
    assert raised.value.countdown >= 30
    refund.refresh_from_db()
    assert refund.status == "processing" and refund.outcome_code != "rail_declined"
    assert (refund.next_check_at - timezone.now()).total_seconds() > 25
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor
    refund = _execute(refund)
    assert refund.status == "succeeded" and len(placed.refunds) == 1
    assert {c["key"] for c in shopify.refund_creates()} == {refund.idempotency_key}


def test_a_throttled_lookup_after_a_lost_answer_is_no_answer(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    """The refund was made and its answer lost; the lookup that follows is throttled: that
    says nothing about the refund, so it is neither failed nor sent again."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 0.5
    shopify.slow_after_refund_seconds = 2.0
    with pytest.raises(RetryLater):
        execute_refund(refund.pk)
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    shopify.throttle, shopify.throttle_wait = {"SillRefunds": 1}, 30.0
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.code == "rail_throttled" and raised.value.ambiguous
    assert Refund.objects.get(pk=refund.pk).status == "processing"
    refund = _execute(refund)
    assert refund.status == "succeeded" and refund.provider_refund_id == placed.refunds[0]["id"]
    assert len(shopify.refund_creates()) == 1 and len(placed.refunds) == 1


def test_a_query_shopify_refuses_as_too_costly_is_not_a_decline(site, shopify, shopify_account):
    """``MAX_COST_EXCEEDED``: the query never ran, so it says nothing of the order or refund."""
    client = shopify_rail_for(site).client
    costly = (
        "query SillTooCostly { orders(first: 250) { nodes { id "
        "lineItems(first: 250) { nodes { sku } } } } }"
    )
    with pytest.raises(PermanentRailError) as raised:
        client.execute(costly, operation="SillTooCostly")
    assert raised.value.code == "rail_error"
    assert "too costly" in raised.value.message and "exceeds" in raised.value.message


def test_a_lookup_of_an_order_with_more_refunds_than_one_query_lists_is_no_answer(
    site, shopify, shopify_account
):
    """Sill's refund may be past the refunds one query lists: "not found" there would let
    a needing-attention refund be failed and its amount released while Shopify holds it."""
    placed = shopify.add_order(total="100.00")
    for _ in range(LISTS_MAX["refunds"]):
        shopify._make_refund(placed, Decimal("0.10"), note="Refunded in the Shopify admin")
    request = RefundRequest(
        refund_id="rf_1",
        idempotency_key="sill-refund-rf_1",
        amount=Money(100, "USD"),
        provider_charge_id=placed.transactions[0]["id"],
        provider_payment_id=str(placed.id),
    )
    with pytest.raises(CannotLookUp):
        shopify_rail_for(site).find_refund(request)


# --- reads: the order sync -------------------------------------------------------------------


def test_a_throttled_order_page_is_waited_out_and_the_sync_reads_on(site, shopify, shopify_account):
    """Throttled twice in a row (more than the client waits out on its own), the sync ended
    with "throttled" and the store's later orders never came in."""
    placed = [shopify.add_order(total=f"{10 + i}.00") for i in range(12)]  # two pages
    shopify.throttle = {"SillOrders": 3}
    report = sync_orders(site=site)
    assert (report.created, report.failed) == (12, 0)
    assert report.throttled_seconds > 0 and "rate limit" in str(report)
    assert Order.objects.filter(site=site).count() == len(placed)


def test_a_throttled_read_of_the_rest_of_an_order_is_not_an_unreadable_order(
    site, shopify, shopify_account
):
    placed = shopify.add_order(total="130.00")
    placed.lines = [(f"SKU-{i}", f"Item {i}", 1, Decimal("1.00")) for i in range(130)]
    shopify.add_order(total="20.00")
    shopify.throttle = {"SillOrderLines": 2}
    report = sync_orders(site=site)
    assert (report.created, report.failed, report.problems) == (2, 0, [])
    order = Order.objects.get(charges__provider_payment_id=str(placed.id))
    assert order.items.count() == 130


def test_a_429_with_retry_after_on_the_order_list_is_waited_out(site, shopify, shopify_account):
    shopify.add_order()
    shopify.http_429, shopify.http_429_retry_after = {"SillOrders": 1}, "2.5"
    assert sync_orders(site=site).created == 1


def test_throttling_past_the_syncs_patience_ends_it_with_words_to_run_again(
    site, shopify, shopify_account, settings
):
    settings.SILL_SHOPIFY_SYNC_THROTTLE_SECONDS = 0.5
    shopify.add_order()
    shopify.throttle = {"SillOrders": 10}
    with pytest.raises(CommandError, match=r"rate limit.*run it again"):
        call_command("rails", "sync-shopify", "--site", site.pk)
    assert not Order.objects.exists()
    shopify.throttle = {}
    call_command("rails", "sync-shopify", "--site", site.pk)
    assert Order.objects.count() == 1
