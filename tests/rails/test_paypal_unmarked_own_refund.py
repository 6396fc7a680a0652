"""Sill's own PayPal refund that PayPal holds without its ``custom_id`` is counted once.

PayPal's webhook for it reads as a refund made in PayPal (the refund is read again at the
loopback PayPal, tests/rails/paypal_stub.py, which holds it without ``custom_id``). Applied
before the worker settles, it was counted outside Sill and then settled as Sill's too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.models import AuditRecord
from refunds.models import Refund
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from sill.rails.paypal.rail import PayPalRail
from tests.rails.test_paypal_refunds import _execute, _refund, settled
from tests.rails.test_paypal_webhooks import own_counters, refund_event, run  # noqa: F401

pytestmark = pytest.mark.django_db


def test_a_refund_paypal_reports_without_custom_id_before_settlement_is_counted_once(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    run,  # noqa: F811
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    order, capture = paypal_order(total="89.00")
    real_refund = PayPalRail.refund
    seen: dict[str, Any] = {}

    def refund_then_unmarked_webhook(self: PayPalRail, request: Any) -> Any:
        result = real_refund(self, request)
        [made] = [r for r in capture.refunds if r["id"] == result.provider_refund_id]
        made.pop("custom_id")  # PayPal holds it without Sill's refund id
        event = refund_event(paypal, capture, value="30.00", refund_id=made["id"])
        assert run(site, paypal, event).status_code == 200
        seen["outcome"] = WebhookEvent.objects.get().outcome
        return result

    monkeypatch.setattr(PayPalRail, "refund", refund_then_unmarked_webhook)
    refund = _refund(
        site,
        members,
        order,
        django_capture_on_commit_callbacks,
        kind="amount",
        amount=Money(3000, "USD"),
    )
    refund, _ = _execute(refund)

    assert "external refund recorded" in seen["outcome"], seen
    assert refund.status == "succeeded"
    charge = Charge.objects.get(order=order)
    assert (
        charge.amount_refunded_minor,
        charge.amount_refunded_outside_minor,
        charge.amount_reserved_minor,
    ) == (3000, 0, 0)
    assert charge.remaining.amount_minor == 5900
    assert Order.objects.get(pk=order.pk).status == "PARTIALLY_REFUNDED"
    assert not ExternalRefund.objects.exists()
    last = AuditRecord.objects.filter(kind="external_refund").order_by("-seq").first()
    assert last is not None and json.loads(last.payload)["body"]["refund_id"] == refund.pk


def test_a_settled_refund_paypal_reports_without_custom_id_is_not_counted_again(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    run,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    order, capture = paypal_order(total="89.00")
    refund = settled(site, members, order, django_capture_on_commit_callbacks, minor=3000)
    capture.refunds[0].pop("custom_id")
    event = refund_event(paypal, capture, value="30.00", refund_id=refund.provider_refund_id)
    assert run(site, paypal, event).status_code == 200

    assert not ExternalRefund.objects.exists()
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (3000, 0)
    assert Refund.objects.get(pk=refund.pk).status == "succeeded"
