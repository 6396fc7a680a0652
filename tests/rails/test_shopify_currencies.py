"""Shopify stores whose currency is not in hundredths: a JPY shop writes ``1200.0``, a KWD shop
``10.125``. The order synced, the refundable amount, each percentage and what refundCreate is
sent agree, in the shop's currency, and several refunds never add up to more than was paid.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from sill.money import Money
from sill.orders.models import Charge, Order
from tests.rails.test_shopify_refunds import _execute, _refund, _synced

pytestmark = pytest.mark.django_db


def _sent(shopify) -> list[str]:
    return [t["amount"] for v in shopify.refund_creates() for t in v["input"]["transactions"]]


@pytest.mark.parametrize(
    ("currency", "total", "minor", "halves", "sent"),
    [
        # 50 % of JPY 1,201 = 600.5 → 601 (half up); then the 600 left.
        ("JPY", "1201", 1201, [601, 600], ["601", "600"]),
        # 50 % of KWD 10.125 = 5.0625 → 5.063; then the 5.062 left.
        ("KWD", "10.125", 10125, [5063, 5062], ["5.063", "5.062"]),
        ("BHD", "0.999", 999, [500, 499], ["0.500", "0.499"]),
    ],
)
def test_percentages_of_a_shop_order_are_sent_in_its_currency_and_add_up_to_what_was_paid(
    site,
    members,
    shopify,
    shopify_account,
    django_capture_on_commit_callbacks,
    currency,
    total,
    minor,
    halves,
    sent,
):
    order, placed = _synced(site, shopify, total=total, currency=currency)
    assert Order.objects.get(pk=order.pk).total == Money(minor, currency)
    assert Charge.objects.get(order=order).amount == Money(minor, currency)
    made = [
        _execute(
            _refund(
                site,
                members,
                order,
                django_capture_on_commit_callbacks,
                kind="percentage",
                percentage=Decimal("50"),
            )
        )
        for _ in halves
    ]
    assert [(r.status, r.amount_minor, r.currency) for r in made] == [
        ("succeeded", m, currency) for m in halves
    ]
    assert _sent(shopify) == sent
    assert placed.refunded() == Decimal(total)
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"
