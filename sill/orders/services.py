"""Writes to orders: creating them, and the state transitions of orders and charges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from sill.accounts.models import Agent, Site
from sill.errors import SillError
from sill.money import MAX_RECORDABLE_MINOR, Money
from sill.orders.models import (
    LINE_QUANTITY_MAX,
    Charge,
    ChargeStatus,
    Customer,
    LineItem,
    Order,
    OrderNumberCounter,
    OrderStatus,
)

# Allowed order status transitions; set_order_status() refuses anything else.
ORDER_TRANSITIONS: dict[str, frozenset[str]] = {
    OrderStatus.PENDING: frozenset({OrderStatus.PAID, OrderStatus.CANCELLED}),
    OrderStatus.PAID: frozenset(
        {
            OrderStatus.SHIPPED,
            OrderStatus.DELIVERED,
            OrderStatus.PARTIALLY_REFUNDED,
            OrderStatus.REFUNDED,
            OrderStatus.CANCELLED,
        }
    ),
    OrderStatus.SHIPPED: frozenset(
        {OrderStatus.DELIVERED, OrderStatus.PARTIALLY_REFUNDED, OrderStatus.REFUNDED}
    ),
    OrderStatus.DELIVERED: frozenset({OrderStatus.PARTIALLY_REFUNDED, OrderStatus.REFUNDED}),
    # Back to PAID (or from REFUNDED to PARTIALLY_REFUNDED) only when the rail reports that a
    # settled refund failed after all: see refresh_refund_status.
    OrderStatus.PARTIALLY_REFUNDED: frozenset({OrderStatus.REFUNDED, OrderStatus.PAID}),
    OrderStatus.REFUNDED: frozenset({OrderStatus.PARTIALLY_REFUNDED, OrderStatus.PAID}),
    OrderStatus.CANCELLED: frozenset(),
}


@dataclass(frozen=True)
class NewLine:
    sku: str
    name: str
    quantity: int
    unit_price: Money


def lines_or_total(lines: Sequence[NewLine], *, total: Money) -> list[NewLine]:
    """A rail's order items as given, or one "Order total" line of ``total`` when there are
    none or they hold what Sill's items cannot (a quantity outside their column, a negative
    price, more in sum than Sill records). A store's order is its total, which its items only
    describe: such an order still comes in, rather than failing its insert on every sync and
    every webhook attempt."""
    if lines and all(
        1 <= line.quantity <= LINE_QUANTITY_MAX and line.unit_price.amount_minor >= 0
        for line in lines
    ):
        summed = sum(line.unit_price.amount_minor * line.quantity for line in lines)
        if summed <= MAX_RECORDABLE_MINOR:
            return list(lines)
    return [NewLine(sku="", name="Order total", quantity=1, unit_price=total)]


# Sill's own numbers start after this; a numbered order is counted up to this many digits
# (the counter is a bigint).
NUMBERS_BEFORE_THE_FIRST = 1000
_COUNTED_DIGITS = 15


def next_order_number(site: Site) -> str:
    """Take the site's next sequential order number, in the caller's transaction.

    The site's counter row stays locked until that transaction ends, so two orders created
    at once never take the same number (the second waits for the first to commit): before,
    both read the highest number and the second hit the (site, number) constraint, which
    agent intake answered as a replayed nonce. The first number taken on a site starts from
    its highest numbered order, read once.
    """
    counter = _locked_counter(site)
    counter.last_number += 1
    counter.save(update_fields=["last_number"])
    return str(counter.last_number)


def _locked_counter(site: Site) -> OrderNumberCounter:
    """The site's counter row, locked until the caller's transaction ends; made first (from
    the site's highest numbered order) if the site has none yet."""
    counters = OrderNumberCounter.objects.select_for_update()
    counter = counters.filter(site=site).first()
    if counter is None:
        OrderNumberCounter.objects.bulk_create(
            [OrderNumberCounter(site=site, last_number=_highest_number(site))],
            # Made meanwhile by a concurrent transaction: this INSERT waits for it to end,
            # then the locked read below finds its row as it committed it.
            ignore_conflicts=True,
        )
        counter = counters.get(site=site)
    return counter


def _counted(number: str) -> int | None:
    if number.isascii() and number.isdigit() and len(number) <= _COUNTED_DIGITS:
        return int(number)
    return None


def _highest_number(site: Site) -> int:
    numbers = Order.objects.filter(site=site, number__regex=r"^[0-9]+$").values_list(
        "number", flat=True
    )
    counted = (n for n in map(_counted, numbers) if n is not None)
    return max(counted, default=NUMBERS_BEFORE_THE_FIRST)


def _number_taken(site: Site, number: str) -> None:
    """An order created with a number of its own (a store's, synced): the site's next
    sequential number comes after it.

    Through the counter row, made here if the site has none yet: otherwise a site's first
    sequential number, taken while such an order was being created, was seeded from the
    numbers committed before it (not this one), and the counter later reached this number
    and collided with it. Now the first number waits for this transaction and counts it."""
    counted = _counted(number)
    if counted is None:
        return
    counter = _locked_counter(site)
    if counter.last_number < counted:
        counter.last_number = counted
        counter.save(update_fields=["last_number"])


@transaction.atomic
def create_order(
    *,
    site: Site,
    lines: Sequence[NewLine],
    currency: str,
    buyer_name: str,
    buyer_email: str,
    number: str | None = None,
    source_mandate_id: str = "",
    placed_by_agent: Agent | None = None,
    customer: Customer | None = None,
) -> Order:
    if not lines:
        raise SillError("an order needs at least one line item", code="invalid_field")
    total = Money.zero(currency)
    for line in lines:
        total = total + Money(line.unit_price.amount_minor * line.quantity, currency)
    if number:
        _number_taken(site, number)
    order = Order.objects.create(
        site=site,
        number=number or next_order_number(site),
        source_mandate_id=source_mandate_id,
        placed_by_agent=placed_by_agent,
        customer=customer,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        currency=total.currency,
        total_minor=total.amount_minor,
        status=OrderStatus.PENDING,
    )
    LineItem.objects.bulk_create(
        LineItem(
            order=order,
            sku=line.sku,
            name=line.name,
            quantity=line.quantity,
            unit_price_minor=line.unit_price.amount_minor,
            currency=total.currency,
        )
        for line in lines
    )
    return order


def set_order_status(*, order: Order, status: str) -> Order:
    """The one function that changes ``Order.status``; refuses transitions not in the table."""
    if status == order.status:
        return order
    if status not in ORDER_TRANSITIONS.get(order.status, frozenset()):
        raise SillError(
            f"an order cannot go from {order.status} to {status}", code="invalid_transition"
        )
    order.status = status
    order.save(update_fields=["status", "updated_at"])
    return order


def refresh_refund_status(order: Order) -> Order:
    """Set the (locked) order's status from what its charges have refunded, by Sill or outside.

    PAID, SHIPPED or DELIVERED become PARTIALLY_REFUNDED, then REFUNDED, as refunds settle;
    a refund the rail reports failed after settlement takes the order back (to PAID when
    nothing stays refunded). PENDING and CANCELLED orders are never touched.
    """
    if order.status in (OrderStatus.PENDING, OrderStatus.CANCELLED):
        return order
    charges = list(Charge.objects.filter(order=order, status=ChargeStatus.SUCCEEDED))
    charged = sum(c.amount_minor for c in charges)
    refunded = sum(c.amount_refunded_minor + c.amount_refunded_outside_minor for c in charges)
    status: str
    if charged and refunded >= charged:
        status = OrderStatus.REFUNDED
    elif refunded > 0:
        status = OrderStatus.PARTIALLY_REFUNDED
    elif order.status in (OrderStatus.PARTIALLY_REFUNDED, OrderStatus.REFUNDED):
        status = OrderStatus.PAID
    else:
        status = order.status
    return set_order_status(order=order, status=status)


@transaction.atomic
def record_charge_result(
    *,
    charge: Charge,
    succeeded: bool,
    provider_payment_id: str = "",
    provider_charge_id: str = "",
    captured_at: datetime | None = None,
    failure_message: str = "",
) -> Charge:
    """Settle a pending charge once; the order becomes PAID when it succeeded."""
    charge = Charge.objects.select_for_update().get(pk=charge.pk)
    if charge.status != ChargeStatus.PENDING:
        return charge
    charge.provider_payment_id = provider_payment_id
    charge.provider_charge_id = provider_charge_id
    if succeeded:
        charge.status = ChargeStatus.SUCCEEDED
        charge.captured_at = captured_at
    else:
        charge.status = ChargeStatus.FAILED
        charge.failure_message = failure_message[:500]
    charge.save()
    if succeeded:
        set_order_status(order=charge.order, status=OrderStatus.PAID)
    return charge
