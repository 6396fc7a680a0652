"""Reconciliation of Shopify orders: the rail lists an order's refunds and Shopify Payments
disputes (one ``SillOrder`` query for both), so a run compares them with Sill's books as it
does Stripe's and PayPal's, through the loopback Shopify (tests/rails/shopify_stub.py).

Seen before: reconciliation covered Stripe only. A refund made in the Shopify admin whose
webhook never came stayed out of Sill's books until the order happened to change again.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone

from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.runs import run_reconciliation
from sill.orders.models import Charge, Dispute, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from tests.rails.shopify_fixtures import signed_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook(site, django_capture_on_commit_callbacks):
    """``webhook(placed, topic, webhook_id)``: Shopify's webhook about an order at the stub,
    processed (its task re-reads the order) when it commits. Each one reports a change, so its
    body carries a new ``updated_at``, as Shopify's do (Sill keeps each body once)."""

    def deliver(placed, topic: str, webhook_id: str) -> None:
        body = json.dumps(
            {
                "id": placed.id,
                "admin_graphql_api_id": placed.gid,
                "updated_at": timezone.now().isoformat(),
            }
        ).encode()
        headers = signed_headers(body, topic=topic, webhook_id=webhook_id)
        with django_capture_on_commit_callbacks(execute=True):
            response = Client().post(
                f"/webhooks/shopify/{site.pk}", body, content_type="application/json", **headers
            )
        assert response.status_code == 200

    return deliver


@pytest.fixture
def synced(site, shopify, shopify_account, webhook):
    """``synced(total)``: a paid test order at the stub, brought into Sill by its webhook."""

    def make(total: str = "60.00", customer_id: int | None = None):
        placed = shopify.add_order(total=total, customer_id=customer_id)
        webhook(placed, "orders/create", f"wh-{placed.id}")
        return placed, Order.objects.get(site=site, charges__provider_payment_id=str(placed.id))

    return make


def _run(account) -> ReconciliationRun:
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.error == ""
    return run


def test_a_refund_made_in_the_admin_without_its_webhook_is_recorded_and_shown(
    shopify, shopify_account, synced
):
    placed, order = synced("60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    calls_before = len(shopify.calls)
    run = _run(shopify_account)
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (1, 0, 1)
    # One order query answered both the refunds and the disputes.
    assert [op for op, _ in shopify.calls[calls_before:]] == ["SillOrder"]
    [item] = ReconciliationItem.objects.filter(order=order)
    assert (item.kind, item.provider_refund_id, item.sill_corrected, item.rail) == (
        "missing_in_sill", made["id"], True, "shopify",
    )  # fmt: skip
    assert ExternalRefund.objects.get(charge__order=order).counted_minor == 2000
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 2000


def test_a_refund_sill_settled_that_shopify_lacks_and_a_dispute_are_found(
    site, shopify, shopify_account, synced
):
    placed, order = synced("60.00")
    charge = order.charges.get()
    phantom = Refund.objects.create(
        site=site, order=order, charge=charge, origin="staff", amount_minor=1500,
        currency="USD", rail="shopify", decision="approved", status="succeeded",
        provider_refund_id="gid://shopify/Refund/404",
    )  # fmt: skip
    Charge.objects.filter(pk=charge.pk).update(
        amount_refunded_minor=F("amount_refunded_minor") + 1500
    )
    placed.disputes.append(
        {"id": "gid://shopify/ShopifyPaymentsDispute/9", "status": "UNDER_REVIEW",
         "initiatedAs": "CHARGEBACK"}
    )  # fmt: skip
    _run(shopify_account)
    items = {i.kind: i for i in ReconciliationItem.objects.filter(order=order)}
    assert set(items) == {"missing_at_rail", "missing_in_sill"}
    assert items["missing_at_rail"].refund_id == phantom.pk
    assert "Shopify lists no such refund" in items["missing_at_rail"].detail
    assert Dispute.objects.get(charge=charge).status == "under_review"
    missed = items["missing_in_sill"]  # the dispute, whose webhook never came
    assert missed.key == "missing_in_sill:gid://shopify/ShopifyPaymentsDispute/9"
    assert missed.sill_corrected and "A dispute at Shopify" in missed.detail


def test_an_order_shopify_no_longer_has_is_counted_unreadable(shopify, shopify_account, synced):
    placed, order = synced("60.00")
    del shopify.orders[placed.id]
    run = run_reconciliation(account_id=shopify_account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 1)
    assert not ReconciliationItem.objects.filter(order=order).exists()


def test_an_order_with_more_refunds_than_shopify_lists_is_counted_unreadable(
    shopify, shopify_account, synced
):
    # Compared with the part Shopify lists, Sill's own refunds past it would look missing at
    # Shopify: the charge is not compared at all, and nothing is recorded from the part.
    placed, order = synced("300.00")
    for _ in range(250):
        shopify._make_refund(placed, Decimal("1.00"), note="from the admin")
    run = run_reconciliation(account_id=shopify_account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 1)
    assert not ExternalRefund.objects.filter(charge__order=order).exists()
    assert not ReconciliationItem.objects.filter(order=order).exists()


def test_a_webhook_after_a_run_recorded_the_refund_still_updates_it(
    shopify, shopify_account, synced, webhook
):
    # A refund made in the admin, still pending, whose webhook never came: the run records it
    # (pending counts). It fails at Shopify, and that webhook comes: the run's record is as
    # of its read, not as of the refund's creation, so the webhook's later read wins.
    placed, order = synced("60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    made["transactions"][0]["status"] = "PENDING"
    _run(shopify_account)
    assert ExternalRefund.objects.get(charge__order=order).status == "pending"
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 2000

    made["transactions"][0]["status"] = "FAILURE"
    webhook(placed, "orders/updated", "wh-failed")
    assert WebhookEvent.objects.get(event_id="wh-failed").processed_at is not None
    assert ExternalRefund.objects.get(charge__order=order).status == "failed"
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 0


def test_a_refund_decision_records_a_refund_shopify_reports_before_its_webhook(
    site, members, shopify, shopify_account, synced, django_capture_on_commit_callbacks
):
    from refunds.reasons.services import ensure_default_reasons
    from refunds.staff.services import create_staff_refund
    from sill.errors import SillError
    from sill.money import Money

    placed, order = synced("60.00")
    shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    ensure_default_reasons(site)
    reason = site.refund_reasons.filter(active=True, numchild=0).first()
    with (
        pytest.raises(SillError, match=r"At most \$40\.00"),
        django_capture_on_commit_callbacks(execute=False),
    ):
        create_staff_refund(
            site=site, order=order, actor=members["owner"].user, kind="amount",
            amount=Money(5000, "USD"), reason=reason,
        )  # fmt: skip
    assert ExternalRefund.objects.get(charge__order=order).counted_minor == 2000
    assert shopify.refund_creates() == []


def _staff_refund(site, members, order, amount_minor: int):
    from refunds.reasons.services import ensure_default_reasons
    from refunds.staff.services import create_staff_refund
    from sill.money import Money

    ensure_default_reasons(site)
    reason = site.refund_reasons.filter(active=True, numchild=0).first()
    return create_staff_refund(
        site=site, order=order, actor=members["owner"].user, kind="amount",
        amount=Money(amount_minor, "USD"), reason=reason,
    )  # fmt: skip


@pytest.fixture
def held(site, members, synced, django_capture_on_commit_callbacks):
    """``held(amount_minor, customer_id=None)``: a staff refund of a synced $60.00 order, held
    for review by the conservative template (refunds over $5.00); ``(placed, order, refund)``."""
    from policies.catalog import TEMPLATES
    from policies.services import apply_catalog_item

    apply_catalog_item(
        site=site, actor=members["owner"].user, item=TEMPLATES["conservative"],
        params={"holdOverUsd": "5.00"},
    )  # fmt: skip

    def make(amount_minor: int, customer_id: int | None = None):
        placed, order = synced("60.00", customer_id=customer_id)
        with django_capture_on_commit_callbacks(execute=False):
            refund = _staff_refund(site, members, order, amount_minor)
        assert refund.status == "held"
        return placed, order, refund

    return make


def test_a_refund_a_decision_finds_before_its_webhook_waits_in_the_inbox(
    site, members, shopify, shopify_account, synced, django_capture_on_commit_callbacks
):
    """Seen before: the decision recorded the admin's refund (so the quote counted it) but
    opened no item, and the next run found the books in order: the merchant was never told
    that Shopify's webhook had not come."""
    from sill.errors import SillError

    placed, order = synced("60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    with (
        pytest.raises(SillError, match=r"At most \$40\.00"),
        django_capture_on_commit_callbacks(execute=False),
    ):
        _staff_refund(site, members, order, 5000)
    [item] = ReconciliationItem.objects.filter(order=order)
    assert (item.kind, item.provider_refund_id, item.sill_corrected, item.rail) == (
        "missing_in_sill", made["id"], True, "shopify",
    )  # fmt: skip
    assert item.resolved_at is None and "recorded now" in item.detail
    # A run afterwards finds nothing new, and leaves the item for a person to acknowledge.
    run = _run(shopify_account)
    assert (run.items_opened, run.items_cleared) == (0, 0)
    assert ReconciliationItem.objects.filter(order=order, resolved_at__isnull=True).count() == 1
    assert ExternalRefund.objects.get(charge__order=order).counted_minor == 2000


def test_a_dispute_a_decision_finds_refuses_the_refund_and_waits_in_the_inbox(
    site, members, shopify, shopify_account, synced
):
    from refunds.staff.services import NotRefundable

    placed, order = synced("60.00")
    placed.disputes.append(
        {"id": "gid://shopify/ShopifyPaymentsDispute/12", "status": "NEEDS_RESPONSE",
         "initiatedAs": "CHARGEBACK"}
    )  # fmt: skip
    with pytest.raises(NotRefundable, match="disputed"):
        _staff_refund(site, members, order, 1000)
    assert not Refund.objects.filter(order=order).exists()
    assert Dispute.objects.get(charge__order=order).status == "needs_response"
    [item] = ReconciliationItem.objects.filter(order=order)
    assert item.key == "missing_in_sill:gid://shopify/ShopifyPaymentsDispute/12"
    assert item.sill_corrected and "A dispute at Shopify" in item.detail
    assert _run(shopify_account).items_opened == 0


def test_an_approval_catches_up_with_a_dispute_shopify_reports_and_is_refused(
    members, shopify, held, django_capture_on_commit_callbacks
):
    """Seen before: an approval re-checked the facts from Sill's books only. A held refund
    approved after the charge was disputed at Shopify (its webhook missed) was sent to the
    rail, to be paid twice: once by the refund, once by the chargeback."""
    from refunds.review.decisions import DecisionRefused, approve_refund

    placed, order, refund = held(2000)
    placed.disputes.append(
        {"id": "gid://shopify/ShopifyPaymentsDispute/77", "status": "NEEDS_RESPONSE",
         "initiatedAs": "CHARGEBACK"}
    )  # fmt: skip
    with (
        pytest.raises(DecisionRefused, match=r"(?i)disput") as refused,
        django_capture_on_commit_callbacks(execute=True),
    ):
        approve_refund(refund=refund, actor=members["admin"].user)
    assert refused.value.code == "disputed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("rejected", "disputed")
    assert shopify.refund_creates() == []
    [item] = ReconciliationItem.objects.filter(order=order)
    assert item.key == "missing_in_sill:gid://shopify/ShopifyPaymentsDispute/77"


def test_an_approval_catches_up_with_a_refund_made_in_the_admin_meanwhile(
    members, shopify, held, django_capture_on_commit_callbacks
):
    from refunds.review.decisions import DecisionRefused, approve_refund

    placed, order, refund = held(5000)
    made = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    with (
        pytest.raises(DecisionRefused) as refused,
        django_capture_on_commit_callbacks(execute=True),
    ):
        approve_refund(refund=refund, actor=members["admin"].user)
    assert refused.value.code == "exceeds_refundable"
    assert shopify.refund_creates() == []
    assert ExternalRefund.objects.get(charge__order=order).provider_refund_id == made["id"]
    [item] = ReconciliationItem.objects.filter(order=order)
    assert item.provider_refund_id == made["id"] and item.sill_corrected


def test_an_approval_reads_only_the_charge_at_the_rail(
    members, shopify, held, django_capture_on_commit_callbacks
):
    """An approval needs what the charge holds (refunded, disputed), not the customer's age
    and history: one read, which keeps a Slack approval inside Slack's few seconds."""
    from refunds.review.decisions import approve_refund

    _placed, order, refund = held(2000, customer_id=shopify.add_customer())
    assert order.customer_id is not None
    before = len(shopify.calls)
    with django_capture_on_commit_callbacks(execute=False):
        approved = approve_refund(refund=refund, actor=members["admin"].user)
    assert approved.status == "processing"
    assert [op for op, _ in shopify.calls[before:]] == ["SillChargeFacts"]


def test_a_refund_that_only_restocks_items_is_no_refund_to_record_or_report(
    shopify, shopify_account, synced, webhook
):
    # A Shopify refund may return no money (items restocked only): its total is $0.00 and
    # it has no transactions. Seen before: the webhook's order sync tried to record it as a
    # $0.00 outside refund, which the database refuses, so the order's every update failed
    # and was given up; and every run opened an item saying it would exceed the charge.
    placed, order = synced("60.00")
    restock = shopify._make_refund(placed, Decimal("0.00"), note="restock only")
    restock["transactions"] = []
    webhook(placed, "orders/updated", "wh-restock")
    event = WebhookEvent.objects.get(event_id="wh-restock")
    assert (event.processed_at is not None, event.last_error) == (True, "")
    assert not ExternalRefund.objects.filter(charge__order=order).exists()

    run = _run(shopify_account)
    assert (run.charges_checked, run.charges_unreadable, run.items_opened) == (1, 0, 0)
    assert not ReconciliationItem.objects.filter(order=order).exists()


def test_an_orders_refund_that_does_not_fit_fails_its_event_after_the_rest_is_recorded(
    site, shopify, synced, webhook
):
    # Seen before: the refund that did not fit beside Sill's books ended the order's read, so
    # the refunds Shopify listed after it and the order's disputes were not recorded from the
    # webhook, attempt after attempt; a Stripe charge.refunded rolled all of them back.
    placed, order = synced("60.00")
    charge = order.charges.get()
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_minor=5000)  # Sill's books
    too_large = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    fits = shopify._make_refund(placed, Decimal("10.00"), note="from the admin")
    placed.disputes.append(
        {"id": "gid://shopify/ShopifyPaymentsDispute/7", "status": "NEEDS_RESPONSE",
         "initiatedAs": "CHARGEBACK"}
    )  # fmt: skip

    webhook(placed, "orders/updated", "wh-two-refunds")
    assert [r.provider_refund_id for r in ExternalRefund.objects.filter(charge=charge)] == [
        fits["id"]
    ]
    assert Dispute.objects.filter(charge=charge).count() == 1
    # The one that does not fit fails the event as a one-refund Stripe or PayPal event does.
    event = WebhookEvent.objects.get(event_id="wh-two-refunds")
    assert (event.processed_at, event.attempts) == (None, 1)
    assert event.last_error.startswith("ExceedsCharge: outside refund")
    assert too_large["id"] in event.last_error
