"""Agent purchases: the order a verified purchase mandate describes, charged by a task.

The refund core verifies the mandate and hands over plain values (:class:`Purchase`); this
module knows nothing of mandates. The charge runs in ``sill.orders.tasks.charge_order_task``
(see ``sill.orders.charging``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

from sill.accounts.models import Agent, Site
from sill.orders.models import Charge, ChargeStatus, Customer, Order, OrderStatus
from sill.orders.services import NewLine, create_order, set_order_status
from sill.queue import enqueue_on_commit
from sill.rails.registry import RailDisabled, usable_rail_account


@dataclass(frozen=True)
class Purchase:
    """What an agent asked to buy, already verified: who, what, and how to pay."""

    site: Site
    agent: Agent
    mandate_id: str
    lines: Sequence[NewLine]
    currency: str
    buyer_name: str
    buyer_email: str
    rail: str
    payment_method: str


# pg_advisory_xact_lock(int4, int4) namespace of a buyer's first purchase (refunds.locks
# keeps its namespaces apart from this one).
BUYER_NAMESPACE = 0x5111_B0E1


def _lock_buyer(site: Site, email: str) -> None:
    """Wait until no other purchase of this buyer on this site is in flight (until the
    caller's transaction ends): two first purchases at once each looked the buyer up, found
    nobody and created a customer. On SQLite, whose writers are serialised, nothing to do.
    Taken before the order number's row lock, which is always last."""
    if connection.vendor != "postgresql":
        return
    if not connection.in_atomic_block:
        raise RuntimeError("place_order() must run inside transaction.atomic()")
    # Keyed by PostgreSQL's UPPER(), as the lookup compares (``email__iexact``): Python's
    # lower() tells apart emails that UPPER() equates (a final and a non-final sigma, a
    # dotless i), whose first purchases then took two locks and made two customers.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s || UPPER(%s)))",
            [BUYER_NAMESPACE, f"{site.pk}:", email],
        )


def place_order(*, purchase: Purchase) -> Order:
    """Create the order ``purchase`` describes; charge it after commit (in the caller's
    transaction)."""
    site = purchase.site
    _lock_buyer(site, purchase.buyer_email)
    customer = (
        Customer.objects.filter(site=site, email__iexact=purchase.buyer_email)
        .order_by("pk")
        .first()
    )
    if customer is None:
        customer = Customer.objects.create(
            site=site, email=purchase.buyer_email, name=purchase.buyer_name
        )
    order = create_order(
        site=site,
        lines=list(purchase.lines),
        currency=purchase.currency,
        buyer_name=purchase.buyer_name,
        buyer_email=purchase.buyer_email,
        source_mandate_id=purchase.mandate_id,
        placed_by_agent=purchase.agent,
        customer=customer,
    )
    try:
        # Everything the worker's build of the rail would refuse (live money switched off, a
        # stored key no key opens), not only a rail switched off: refused now, the agent is
        # told rail_disabled, rather than "processing" and then a failure read as a decline.
        usable_rail_account(site_id=site.id, rail=purchase.rail)
    except RailDisabled:
        set_order_status(order=order, status=OrderStatus.CANCELLED)
        return order
    Charge.objects.create(
        order=order,
        rail=purchase.rail,
        amount_minor=order.total_minor,
        currency=order.currency,
        status=ChargeStatus.PENDING,
        payment_method=purchase.payment_method,
    )
    enqueue_on_commit(
        "orders.charge", order.id, purchase.payment_method, recovered_by="orders.recover_stuck"
    )
    return order
