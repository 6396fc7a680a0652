"""Shopify orders as the rail reads them: frozen values parsed from Admin GraphQL answers.

Ids: Sill keeps Shopify's global ids (``gid://shopify/Order/123``) for customers, refunds
and transactions, and the order's numeric id as the charge's ``provider_payment_id`` (the
Shopify admin addresses orders by it: ``https://<shop>/admin/orders/123``). Amounts are read
in the shop's currency (``shopMoney``).

An order Sill cannot read raises :class:`UnreadableOrder`, which :func:`parse_order` alone
raises (it does no I/O): a sync tells it from Shopify being unreachable by its class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sill.money import Money, MoneyError, parse_major, recordable
from sill.rails.base import (
    SILL_REFUND_ID,
    PermanentRailError,
    RailDispute,
    RailError,
    RailRefund,
)

ORDER_GID = "gid://shopify/Order/"
_ORDER_GID_RE = re.compile(r"\Agid://shopify/Order/[1-9][0-9]*\Z")
# Transactions that took the buyer's money (an AUTHORIZATION alone did not).
PAYMENT_KINDS = frozenset({"SALE", "CAPTURE"})
SILL_NOTE_PREFIX = "sill-refund-"
# Sill's refund key in a refund's note ("Refunded by Sill (sill-refund-rf_…)"). The note is
# the merchant's to edit: "sill-refund-" followed by anything but one of Sill's refund ids
# names no refund of Sill's, and the refund counts as made outside Sill.
_SILL_NOTE = re.compile(re.escape(SILL_NOTE_PREFIX) + f"({SILL_REFUND_ID.pattern})(?![0-9A-Z])")

_DISPUTE_STATES = {
    "NEEDS_RESPONSE": "needs_response",
    "UNDER_REVIEW": "under_review",
    "WON": "won",
    "LOST": "lost",
    "ACCEPTED": "lost",
    "CHARGE_REFUNDED": "lost",
}


class UnreadableOrder(PermanentRailError):
    """An order Shopify sent that Sill cannot read: a field missing or malformed."""


@dataclass(frozen=True)
class SkippedOrder:
    """An order of a listed page that could not be read, and why: the sync goes on."""

    gid: str
    reason: str


@dataclass(frozen=True)
class ShopifyCustomer:
    gid: str
    email: str
    name: str
    created_at: datetime | None


@dataclass(frozen=True)
class ShopifyLine:
    sku: str
    name: str
    quantity: int
    unit_price: Money


@dataclass(frozen=True)
class ShopifyPayment:
    """The order's successful sale/capture transactions, summed; ``gid``: the first one."""

    gid: str
    amount: Money
    captured_at: datetime


@dataclass(frozen=True)
class ShopifyOrder:
    gid: str
    legacy_id: str
    name: str
    created_at: datetime
    test: bool
    email: str
    cancelled: bool
    total: Money
    customer: ShopifyCustomer | None
    customer_readable: bool  # False: the token lacks read_customers
    lines: list[ShopifyLine]
    payment: ShopifyPayment | None
    refunds: list[RailRefund]
    disputes: list[RailDispute]
    # The lists Shopify returned in part (``"transactions"``, ``"refunds"``): it cuts them and
    # gives no way to read on (sill.rails.shopify.rail), so the order is not whole.
    cut: tuple[str, ...] = ()


def order_gid(legacy_id: str) -> str:
    return legacy_id if legacy_id.startswith("gid://") else ORDER_GID + legacy_id


def legacy_id(gid: str) -> str:
    return gid.rsplit("/", 1)[-1]


def parse_time(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise PermanentRailError(f"Shopify sent an unreadable time {value!r}") from None


def shop_money(bag: Any) -> Money:
    """A ``MoneyBag``'s shop amount (``{"shopMoney": {"amount": "89.00", ...}}``). Every one
    Sill reads (a total, a price, a payment, a refund) is never negative: one that is fails
    the columns' checks, so it is unreadable here, as a WooCommerce order's negative total is."""
    try:
        money = bag["shopMoney"]
        found = recordable(parse_major(str(money["amount"]), str(money["currencyCode"])))
    except MoneyError as exc:
        raise PermanentRailError(f"Shopify sent an unreadable amount ({exc})") from None
    except (KeyError, TypeError, ValueError):
        raise PermanentRailError("Shopify sent an unreadable amount") from None
    if found.amount_minor < 0:
        raise PermanentRailError(f"Shopify sent a negative amount ({found})")
    return found


def refund_state(refund: dict[str, Any]) -> str:
    """A refund's state from its transactions: ``succeeded``, ``pending`` or ``failed``.

    One that succeeded is enough. A list Shopify says goes on (``pageInfo.hasNextPage``:
    the rail reads on, sill.rails.shopify.rail) with none succeeded in it is never
    ``failed``: one past it may have succeeded."""
    transactions = refund.get("transactions") or {}
    statuses = {str(t.get("status")) for t in transactions.get("nodes") or []}
    if "SUCCESS" in statuses:
        return "succeeded"
    if statuses & {"PENDING", "AWAITING_RESPONSE", "UNKNOWN"} or not statuses:
        return "pending"
    if (transactions.get("pageInfo") or {}).get("hasNextPage"):
        return "pending"
    return "failed"


def rail_refund(refund: dict[str, Any]) -> RailRefund:
    amount = shop_money(refund.get("totalRefundedSet"))
    note = str(refund.get("note") or "")
    named = _SILL_NOTE.search(note)
    return RailRefund(
        provider_refund_id=str(refund["id"]),
        amount_minor=amount.amount_minor,
        currency=amount.currency,
        status=refund_state(refund),
        created_at=parse_time(refund.get("createdAt")),
        sill_refund_id=named.group(1) if named else "",
    )


def rail_dispute(dispute: dict[str, Any], *, total: Money, at: datetime) -> RailDispute:
    # OrderDisputeSummary carries no amount: a Shopify Payments dispute is of the order.
    return RailDispute(
        provider_dispute_id=str(dispute["id"]),
        amount_minor=total.amount_minor,
        currency=total.currency,
        reason=str(dispute.get("initiatedAs") or "chargeback").lower(),
        status=_DISPUTE_STATES.get(str(dispute.get("status")), "needs_response"),
        created_at=at,
    )


def parse_order(
    node: Any, *, customer_readable: bool = True, cut: tuple[str, ...] = ()
) -> ShopifyOrder:
    """The order in ``node`` (its line items all there); raises ``UnreadableOrder``."""
    try:
        return _parse_order(node, customer_readable, cut)
    except (RailError, KeyError, TypeError, ValueError, AttributeError) as exc:
        gid = node.get("id") if isinstance(node, dict) else None
        detail = exc.message if isinstance(exc, RailError) else f"{type(exc).__name__}: {exc}"
        raise UnreadableOrder(
            f"Shopify order {gid or '(without an id)'} is unreadable: {detail}"
        ) from None


def _parse_order(node: Any, customer_readable: bool, cut: tuple[str, ...]) -> ShopifyOrder:
    gid = node["id"]
    if not isinstance(gid, str) or not _ORDER_GID_RE.match(gid):
        raise ValueError(f"not an order id: {gid!r}")
    total = shop_money(node.get("totalPriceSet"))
    created = parse_time(node.get("createdAt"))
    customer = None
    raw = node.get("customer")
    if isinstance(raw, dict) and raw.get("id"):
        # At most what a customer's and an order's buyer name hold (Shopify allows 255 each).
        name = " ".join(str(raw.get(k) or "") for k in ("firstName", "lastName")).strip()[:200]
        customer = ShopifyCustomer(
            gid=str(raw["id"]),
            email=str(raw.get("email") or ""),
            name=name,
            created_at=parse_time(raw["createdAt"]) if raw.get("createdAt") else None,
        )
    lines = []
    for item in (node.get("lineItems") or {}).get("nodes") or []:
        lines.append(
            ShopifyLine(
                sku=str(item.get("sku") or "")[:100],
                name=str(item.get("name") or "Item")[:300],
                quantity=max(int(item.get("quantity") or 1), 1),
                unit_price=shop_money(item.get("originalUnitPriceSet")),
            )
        )
    paid = [
        t
        for t in node.get("transactions") or []
        if t.get("kind") in PAYMENT_KINDS and t.get("status") == "SUCCESS"
    ]
    payment = None
    if paid:
        amount = Money.zero(total.currency)
        for t in paid:
            amount = amount + shop_money(t.get("amountSet"))
        recordable(amount)  # each capture may fit and their sum, the charge, not
        first = paid[0]
        payment = ShopifyPayment(
            gid=str(first["id"]),
            amount=amount,
            captured_at=parse_time(first.get("processedAt") or first.get("createdAt")),
        )
    return ShopifyOrder(
        gid=gid,
        legacy_id=legacy_id(gid),
        # Whole: sill.rails.shopify.sync fits it to an order number.
        name=str(node.get("name") or "").lstrip("#"),
        created_at=created,
        test=bool(node.get("test")),
        email=str(node.get("email") or ""),
        cancelled=bool(node.get("cancelledAt")),
        total=total,
        customer=customer,
        customer_readable=customer_readable,
        lines=lines,
        payment=payment,
        refunds=[rail_refund(r) for r in node.get("refunds") or []],
        disputes=[rail_dispute(d, total=total, at=created) for d in node.get("disputes") or []],
        cut=cut,
    )
