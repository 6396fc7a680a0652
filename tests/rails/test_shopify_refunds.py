"""Refunds on Shopify, executed by refunds.execution against the loopback store.

Each refund is a staff refund decided through the real pipeline (create_staff_refund), then
executed the way the refund task executes it (``execute_refund``, again after a RetryLater).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.rails.shopify.sync import sync_orders
from tests.worker import running_worker, wait_for

pytestmark = pytest.mark.django_db


def _synced(site, shopify, **order) -> tuple[Order, object]:
    placed = shopify.add_order(**order)
    sync_orders(site=site)
    return Order.objects.get(charges__provider_payment_id=str(placed.id)), placed


def _refund(site, members, order, django_capture_on_commit_callbacks, **kind) -> Refund:
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with django_capture_on_commit_callbacks(execute=False):
        return create_staff_refund(
            site=site,
            order=order,
            actor=members["staff"].user,
            kind=kind.pop("kind", "full"),
            reason=reason,
            **kind,
        )


def _execute(refund: Refund, *, tries: int = 3) -> Refund:
    for _ in range(tries):
        try:
            execute_refund(refund.pk)
            break
        except RetryLater:
            Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    return Refund.objects.get(pk=refund.pk)


def test_it_refunds_the_original_payment_once_without_restocking(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "processing"
    refund = _execute(refund)
    assert refund.status == "succeeded"
    assert refund.provider_refund_id == placed.refunds[0]["id"]
    [create] = shopify.refund_creates()
    assert create["key"] == f"sill-refund-{refund.pk}" == refund.idempotency_key
    assert "refundLineItems" not in create["input"]  # nothing restocked
    assert create["input"]["transactions"] == [
        {
            "orderId": placed.gid,
            "parentId": placed.transactions[0]["id"],
            "amount": "89.00",
            "gateway": "bogus",
            "kind": "REFUND",
        }
    ]
    assert refund.idempotency_key in placed.refunds[0]["note"]
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"
    # A later sync finds Sill's own refund by its note: no outside refund.
    sync_orders(site=site)
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 0


def test_a_staff_partial_refund_refunds_that_amount(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(
        site, members, order, django_capture_on_commit_callbacks,
        kind="amount", amount=Money(3000, "USD"),
    )  # fmt: skip
    assert _execute(refund).status == "succeeded"
    assert str(placed.refunds[0]["amount"]) == "30.00"
    assert Order.objects.get(pk=order.pk).status == "PARTIALLY_REFUNDED"


def test_user_errors_fail_the_refund_with_the_code_and_release_it(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    shopify.user_errors.append(
        {"field": ["transactions"], "message": "Transaction gateway is not supported"}
    )
    refund = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert (refund.status, refund.outcome_code) == ("failed", "rail_declined")
    assert "Transaction gateway is not supported" in refund.failure_message
    assert not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


@pytest.mark.parametrize(
    ("outside", "code", "status", "left"),
    [
        ("89.00", "already_refunded", "REFUNDED", 0),
        ("80.00", "exceeds_refundable", "PARTIALLY_REFUNDED", 900),
    ],
)
def test_a_refund_made_in_the_shopify_admin_since_the_decision_is_brought_in_when_shopify_refuses(
    site,
    members,
    shopify,
    shopify_account,
    client_for,
    django_capture_on_commit_callbacks,
    outside,
    code,
    status,
    left,
):
    """The order is refunded in the Shopify admin after Sill decided (its webhook not in yet):
    Shopify suggests less than Sill asks and nothing is sent. The failure said "Declined by the
    rail ... Refund again from the form below" with the old amount still offered; now the code
    says the rail holds more refunds than Sill, and Sill reads the order at once."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    shopify._make_refund(placed, Decimal(outside), note="Refunded in the Shopify admin")
    with django_capture_on_commit_callbacks(execute=True):
        refund = _execute(refund)
    assert (refund.status, refund.outcome_code) == ("failed", code)
    assert shopify.refund_creates() == [] and len(placed.refunds) == 1
    assert Order.objects.get(pk=order.pk).status == status
    charge = Charge.objects.get(order=order)
    assert (charge.remaining.amount_minor, charge.amount_reserved_minor) == (left, 0)
    page = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    assert "Refund again from the form below" not in page
    assert "the rail already holds a refund or dispute of this payment" in page


def test_an_order_paid_in_another_currency_than_the_shops_is_refused_with_nothing_sent(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    """A multi-currency store: the buyer paid in EUR, the shop's books are in USD. Shopify
    refunds such an order in the buyer's (presentment) currency, with ``currency`` named,
    while Sill's amounts are the shop's: a refund sent as before would at best be refused
    and at worst read as 89 EUR for an 89 USD refund. The decision refuses it
    (tests/rails/test_shopify_presentment_currency.py); a refund decided anyway (before Sill
    read the currency with the facts) is refused again before refundCreate."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    placed.presentment_currency = "EUR"
    refund = _execute(refund)
    assert (refund.status, refund.outcome_code) == ("failed", "rail_declined")
    assert "paid in EUR" in refund.failure_message and "USD" in refund.failure_message
    assert shopify.refund_creates() == [] and not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_throttling_is_waited_out_then_retried_with_the_same_key(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    shopify.throttle = {"SillRefundCreate": 1}  # a short wait: slept in-process
    shopify.http_429 = {"SillRefundPlan": 1}
    assert _execute(refund, tries=1).status == "succeeded"
    assert len(shopify.refund_creates()) == 2 and len(placed.refunds) == 1


def test_a_long_throttle_is_left_to_the_task_backoff(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    shopify.throttle, shopify.throttle_wait = {"SillRefundCreate": 1}, 30.0
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.code == "rail_throttled"
    assert Refund.objects.get(pk=refund.pk).status == "processing" and not placed.refunds
    refund = _execute(refund)
    assert refund.status == "succeeded" and len(placed.refunds) == 1


def test_a_timeout_after_the_refund_is_recovered_by_lookup_with_one_refund(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 0.5
    shopify.slow_after_refund_seconds = 2.0  # made, then answered too late
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.ambiguous
    assert len(placed.refunds) == 1
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    execute_refund(refund.pk)
    refund.refresh_from_db()
    assert refund.status == "succeeded" and refund.provider_refund_id == placed.refunds[0]["id"]
    assert len(shopify.refund_creates()) == 1 and len(placed.refunds) == 1
    assert [op for op, _ in shopify.calls].count("SillRefunds") == 1


def test_a_resend_while_shopify_still_works_on_the_first_is_retried_never_failed(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    """The first refundCreate times out while Shopify is still making the refund; the retry
    finds no refund yet and sends the same key again, which Shopify answers
    IDEMPOTENCY_CONCURRENT_REQUEST. That is no refusal: failing the refund released its
    amount while Shopify went on to refund the buyer, so a second refund could follow."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 0.5
    shopify.slow_before_refund_seconds = 2.5
    with pytest.raises(RetryLater) as first:
        execute_refund(refund.pk)
    assert first.value.ambiguous and not placed.refunds
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    with pytest.raises(RetryLater) as second:
        execute_refund(refund.pk)
    assert second.value.ambiguous
    refund.refresh_from_db()
    assert refund.status == "processing" and refund.outcome_code != "rail_declined"
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor
    wait_for(lambda: len(placed.refunds) == 1, timeout=10)
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    execute_refund(refund.pk)
    refund.refresh_from_db()
    assert refund.status == "succeeded" and refund.provider_refund_id == placed.refunds[0]["id"]
    assert len(placed.refunds) == 1


@pytest.mark.parametrize(
    "refusal",
    [
        {"top": "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"},
        {"user": "This request is currently in progress, please try again."},
        {"user": "The same idempotency key cannot be used with different operation parameters."},
    ],
)
def test_a_refusal_of_the_idempotency_key_is_never_read_as_a_declined_refund(
    site, members, shopify, shopify_account, refusal, django_capture_on_commit_callbacks
):
    """Whatever form Shopify's answer about the key takes (the GraphQL error's code, or a
    user error's words), an earlier request under that key exists and may have refunded:
    the refund is retried under the same key and then needs attention, never failed."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    if "top" in refusal:
        shopify.idempotency_errors.append(refusal["top"])
    else:
        shopify.user_errors.append({"field": None, "message": refusal["user"]})
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.ambiguous
    refund.refresh_from_db()
    assert refund.status == "processing" and not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor


@pytest.mark.parametrize("live", ["store", "order"])
def test_a_live_store_or_a_real_order_is_refused_at_execution_with_nothing_sent(
    site, members, shopify, shopify_account, live, django_capture_on_commit_callbacks
):
    """Decided while the order looked like a test on a development store; by execution it is
    not (the store left its development plan, or the order was never a test): the rail's
    own check, made on every refund call, refuses it before refundCreate."""
    order, placed = _synced(site, shopify)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "processing"
    if live == "store":
        shopify.plan = {"partnerDevelopment": False, "publicDisplayName": "Basic"}
    else:
        placed.test = False
    refund = _execute(refund)
    assert (refund.status, refund.outcome_code) == ("failed", "live_not_allowed")
    assert shopify.refund_creates() == [] and not placed.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 0


def test_a_real_order_is_refused_at_decision_time(
    site, members, shopify, shopify_account, django_capture_on_commit_callbacks
):
    order, _placed = _synced(site, shopify, test=False)
    with pytest.raises(SillError) as refused:
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert "test orders on a development store" in refused.value.message
    assert shopify.refund_creates() == [] and not Refund.objects.filter(status="processing")


def test_sill_allow_live_lets_a_real_order_be_refunded(
    site, members, shopify, shopify_account, settings, django_capture_on_commit_callbacks
):
    settings.SILL_ALLOW_LIVE = True
    order, placed = _synced(site, shopify, test=False)
    refund = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded" and len(placed.refunds) == 1


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_refunds_a_shopify_order(tmp_path, site, members, shopify, shopify_account):
    order, placed = _synced(site, shopify)
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with running_worker(tmp_path / "worker.log"):
        refund = create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
        )
        wait_for(
            lambda: Refund.objects.get(pk=refund.pk).status == "succeeded",
            timeout=60,
            what="the Shopify refund",
        )
    refund.refresh_from_db()
    assert refund.provider_refund_id == placed.refunds[0]["id"] and len(placed.refunds) == 1
