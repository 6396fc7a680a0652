"""A refund the rail reports ends the same in Sill's books whether its webhook or a
reconciliation run brought it: the outside refund's amount, currency, status, reason and
time at the rail, what the charge counts, the order's status, and Sill's own refund found by
its provider id (and why it failed).

Each test runs once per path against the rail's loopback (localstripe, the PayPal and
Shopify stubs) and checks the same books. Seen before: a refund the rail reports failed was
recorded by its webhook and not by reconciliation, so a late webhook with the refund's earlier
state counted it as refunded; and PayPal's webhook dropped why Sill's refund failed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from refunds.models import Refund
from refunds.reconcile.runs import run_reconciliation
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.models import RailAccount
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event
from tests.rails.test_paypal_refunds import settled
from tests.rails.test_paypal_webhooks import own_counters, run  # noqa: F401
from tests.rails.test_shopify_reconciliation import synced, webhook  # noqa: F401

pytestmark = pytest.mark.django_db

PATHS = ["webhook", "reconciliation"]


def _reconcile(account: RailAccount) -> None:
    done = run_reconciliation(account_id=account.pk, force=True)
    assert done is not None and done.error == "" and done.charges_unreadable == 0


def _books(order: Order) -> dict[str, Any]:
    charge = Charge.objects.get(order=order)
    return {
        "outside": [
            (
                r.provider_refund_id,
                r.amount_minor,
                r.currency,
                r.counted_minor,
                r.status,
                r.reason,
                r.created_at_rail,
            )
            for r in ExternalRefund.objects.filter(charge=charge).order_by("provider_refund_id")
        ],
        "charge": (
            charge.amount_refunded_minor,
            charge.amount_refunded_outside_minor,
            charge.amount_reserved_minor,
        ),
        "order": Order.objects.get(pk=order.pk).status,
    }


@pytest.mark.parametrize("path", PATHS)
def test_stripe_an_outside_refund(path, site, paid, sdk, deliver):
    made = as_dict(
        sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 2500})
    )
    if path == "webhook":
        body = event("refund.created", made, event_id="evt_two_paths_1")
        assert deliver(site, body).status_code == 200
    else:
        _reconcile(RailAccount.objects.get(site=site, rail="stripe"))

    at = datetime.fromtimestamp(made["created"], tz=UTC)
    assert _books(paid.order) == {
        "outside": [(made["id"], 2500, "USD", 2500, "succeeded", "", at)],
        "charge": (0, 2500, 0),
        "order": "PARTIALLY_REFUNDED",
    }


WHEN = "2026-11-30T08:15:00.000Z"
AT = datetime(2026, 11, 30, 8, 15, tzinfo=UTC)


def _paypal_webhook(run, site, paypal, capture, refund: dict[str, Any]) -> None:  # noqa: F811
    """PayPal's webhook for ``refund``, which PayPal holds as it is."""
    body = {
        "id": f"WH-{refund['id']}",
        "create_time": WHEN,
        "resource_type": "refund",
        "event_type": "PAYMENT.CAPTURE.REFUNDED",
        "resource": json.loads(json.dumps(refund)),
    }
    assert run(site, paypal, body).status_code == 200


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED"])
@pytest.mark.parametrize("path", PATHS)
def test_paypal_an_outside_refund(
    path,
    status,
    site,
    paypal,
    paypal_account,
    paypal_order,
    run,  # noqa: F811
):
    order, capture = paypal_order(total="89.00")
    made = paypal.add_refund(capture, value="30.00", status=status, when=WHEN)
    made["note_to_payer"] = "Sorry, it broke"
    if path == "webhook":
        _paypal_webhook(run, site, paypal, capture, made)
    else:
        _reconcile(paypal_account)

    counted = 3000 if status == "COMPLETED" else 0
    state = "succeeded" if status == "COMPLETED" else "failed"
    assert _books(order) == {
        "outside": [(made["id"], 3000, "USD", counted, state, "Sorry, it broke", AT)],
        "charge": (0, counted, 0),
        "order": "PARTIALLY_REFUNDED" if counted else "PAID",
    }


@pytest.mark.parametrize("path", PATHS)
def test_paypal_sills_refund_reported_failed_without_its_custom_id(
    path,
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
    [made] = capture.refunds
    made.pop("custom_id")  # PayPal holds it without Sill's refund id
    made.update(status="FAILED", status_details={"reason": "ECHECK"})
    if path == "webhook":
        _paypal_webhook(run, site, paypal, capture, made)
    else:
        _reconcile(paypal_account)

    refund = Refund.objects.get(pk=refund.pk)
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    assert "failed after it was settled (ECHECK)" in refund.failure_message
    assert _books(order) == {"outside": [], "charge": (0, 0, 0), "order": "PAID"}


@pytest.mark.parametrize("state", ["SUCCESS", "FAILURE"])
@pytest.mark.parametrize("path", PATHS)
def test_shopify_an_outside_refund(
    path,
    state,
    shopify,
    shopify_account,
    synced,  # noqa: F811
    webhook,  # noqa: F811
):
    placed, order = synced("60.00")
    made = shopify._make_refund(placed, Decimal("20.00"), note="from the admin")
    made["createdAt"] = "2026-11-30T08:15:00Z"
    made["transactions"][0]["status"] = state
    if path == "webhook":
        webhook(placed, "orders/updated", f"wh-updated-{placed.id}")
    else:
        _reconcile(shopify_account)

    counted = 2000 if state == "SUCCESS" else 0
    assert _books(order) == {
        "outside": [
            (made["id"], 2000, "USD", counted, "succeeded" if counted else "failed", "", AT)
        ],
        "charge": (0, counted, 0),
        "order": "PARTIALLY_REFUNDED" if counted else "PAID",
    }
