"""Orders a switch of account leaves behind: payments taken on a Shopify shop or WooCommerce
store (``Charge.provider_account``), or on a Stripe account or PayPal merchant account
(``Charge.payment_account``), the site is no longer connected to.

Sill refuses to refund them (``rail_disabled``: :func:`sill.rails.registry.account_moved`)
until their account is connected again, because the account connected now does not hold
them. A merchant who switches stores should not find that out one refusal at a time: the
rail's card in Settings → Rails says, per earlier account, how many such orders still have
money left to refund and how much, and so does the message after the switch.

How much is left counts the refunds made outside Sill that each charge records. An earlier
WooCommerce store's payments are on the site's Stripe account, and reconciliation keeps
recording what Stripe reports about them
(:func:`sill.rails.registry.readable_with_connected_account`); an earlier Shopify shop's
orders are not read (only that shop's token could).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, F, QuerySet, Sum

from sill.money import Money, format_money
from sill.orders.models import Charge, ChargeStatus, Rail
from sill.rails.registry import account_rail

# The rails whose orders belong to one account (a shop, a store) and whose charges name it.
ACCOUNT_RAILS = frozenset({Rail.SHOPIFY, Rail.WOOCOMMERCE})
# The rails whose credentials act on one payment account, which their charges name
# (sill.rails.payment_account).
PAYMENT_ACCOUNT_RAILS = frozenset({Rail.STRIPE, Rail.PAYPAL})


@dataclass(frozen=True)
class LeftBehind:
    """The orders of one earlier account with money left to refund."""

    account: str
    orders: int
    refundable: tuple[Money, ...]  # per currency, largest first

    @property
    def sentence(self) -> str:
        amounts = " and ".join(format_money(m) for m in self.refundable)
        orders = "1 order" if self.orders == 1 else f"{self.orders} orders"
        verb = "was" if self.orders == 1 else "were"
        return (
            f"{orders} from {self.account} ({amounts} still refundable) {verb} paid on an "
            f"account this site is no longer connected to: Sill refuses their refunds until "
            f"{self.account} is connected again."
        )


def left_behind(*, site_id: str, rail: str, connected: str) -> list[LeftBehind]:
    """The site's orders of ``rail``'s accounts (a Shopify shop; a WooCommerce store, whose
    orders are paid on Stripe: :func:`sill.rails.registry.account_rail`) taken on another
    account than ``connected`` (the one connected now; blank: none) that have money left to
    refund, per earlier account (one query). Charges naming no account are the connected
    one's (as everywhere)."""
    charge_rails = [r for r in Rail.values if account_rail(r) == rail]
    charges = Charge.objects.filter(order__site_id=site_id, rail__in=charge_rails)
    return _per_account(charges, field="provider_account", connected=connected)


def payment_left_behind(*, site_id: str, rail: str, connected: str) -> list[LeftBehind]:
    """The site's charges on ``rail`` (Stripe, PayPal) taken on another payment account
    (``Charge.payment_account``) than ``connected``, the one the site's key acts on now, that
    have money left to refund, per earlier account (one query). None while the key's account
    is unknown (blank), as :func:`sill.rails.registry.payment_account_moved` refuses none."""
    if not connected:
        return []
    charges = Charge.objects.filter(order__site_id=site_id, rail=rail)
    return _per_account(charges, field="payment_account", connected=connected)


def _per_account(charges: QuerySet[Charge], *, field: str, connected: str) -> list[LeftBehind]:
    left = (
        F("amount_minor")
        - F("amount_refunded_minor")
        - F("amount_refunded_outside_minor")
        - F("amount_reserved_minor")
    )
    rows = (
        charges.filter(status=ChargeStatus.SUCCEEDED)
        .exclude(**{field: ""})
        .exclude(**{field: connected})
        .alias(left=left)
        .filter(left__gt=0)
        .values(field, "currency")
        .annotate(orders=Count("order_id", distinct=True), refundable=Sum(left))
        .order_by(field, "currency")
    )
    grouped: dict[str, tuple[int, list[Money]]] = {}
    for row in rows:
        orders, amounts = grouped.get(row[field], (0, []))
        amounts.append(Money(row["refundable"], row["currency"]))
        grouped[row[field]] = (orders + row["orders"], amounts)
    return [
        LeftBehind(account=account, orders=orders, refundable=_largest_first(amounts))
        for account, (orders, amounts) in grouped.items()
    ]


def _largest_first(amounts: Sequence[Money]) -> tuple[Money, ...]:
    return tuple(sorted(amounts, key=lambda m: (-m.amount_minor, m.currency)))
