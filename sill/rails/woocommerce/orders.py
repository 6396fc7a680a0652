"""WooCommerce orders as Sill reads them: frozen values parsed from REST v3 order JSON.

The store's payments are Stripe charges (the WooCommerce Stripe gateway): the order's
``_stripe_intent_id`` / ``_stripe_charge_id`` meta, else its ``transaction_id`` (``pi_…`` or
``ch_…``). An order is *paid* when it has ``date_paid_gmt``, a paid status and a Stripe id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from audit.chain import MAX_SAFE_INTEGER
from sill.money import Money, MoneyError, parse_major, recordable

PAID_STATUSES = frozenset({"processing", "completed", "on-hold", "refunded"})
SILL_REFUND_MARK = "Sill refund "
# What a line item's quantity column holds (a 4-byte integer); more is one line for the lot.
MAX_QUANTITY = 2**31 - 1
# What a signed record holds (the charge's names its Woo order id: audit.chain), less than the
# id's column does (``WooOrderLink.woo_order_id``, a bigint). Woo's are far below.
MAX_ORDER_ID = MAX_SAFE_INTEGER + 1
# What a charge's Stripe ids hold (``Charge.provider_charge_id``, ``provider_payment_id``).
STRIPE_ID_MAX = 255


class UnreadableOrder(ValueError):
    """The JSON is not a WooCommerce order Sill can read (a stable reason in the message)."""


@dataclass(frozen=True)
class WooLine:
    sku: str
    name: str
    quantity: int
    unit_price: Money


@dataclass(frozen=True)
class WooOrder:
    id: int
    number: str
    status: str
    total: Money
    created_at: datetime
    modified_at: datetime | None
    paid_at: datetime | None
    email: str
    name: str
    payment_method: str
    stripe_payment_intent: str
    stripe_charge: str
    lines: list[WooLine]

    @property
    def paid(self) -> bool:
        return (
            self.paid_at is not None
            and self.status in PAID_STATUSES
            and bool(self.stripe_charge or self.stripe_payment_intent)
        )


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise UnreadableOrder(f"unreadable time {value!r}") from None
    # WooCommerce's *_gmt fields carry no offset: they are UTC.
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _meta(order: dict[str, Any], key: str) -> str:
    for item in order.get("meta_data") or []:
        if isinstance(item, dict) and item.get("key") == key and isinstance(item.get("value"), str):
            return item["value"]
    return ""


def _store_key(url: str) -> str:
    """A store's address as compared: host (lowercased, with its port unless it is a scheme's
    default, 80 or 443) and path, without the scheme, which WordPress writes http or https as
    the request that built a link was (and a merchant may have pasted ``:443``)."""
    parts = urlsplit(url.strip())
    host = parts.netloc.lower()
    if not host.endswith("]"):  # an IPv6 literal with no port ends with its bracket
        name, colon, port = host.rpartition(":")
        if colon and port in ("80", "443"):
            host = name
    return f"{host}{parts.path}".rstrip("/")


def names_another_store(order: dict[str, Any], *, store_url: str) -> bool:
    """Whether an order's JSON says it belongs to another store than ``store_url``; False
    when it says nothing (:func:`store_named_by`)."""
    named = store_named_by(order)
    return named is not None and not same_store(named, store_url)


def store_named_by(order: dict[str, Any]) -> str | None:
    """The store an order's JSON says it belongs to (``//host/path``), or None when it says
    nothing Sill can read.

    WooCommerce's REST answer links the order to itself, and a webhook's body is that answer
    (``_links`` included), signed: ``<store>/wp-json/wc/v3/orders/<id>`` (``<store>/index.php/
    wp-json/…`` with PATHINFO permalinks, ``<store>/index.php?rest_route=/wc/v3/orders/<id>``
    with none). The store is its ``home_url``, which ``X-WC-Webhook-Source`` names unsigned.
    A subdirectory is a store of its own (a WordPress network's sites): its path counts.
    """
    links = order.get("_links")
    own = links.get("self") if isinstance(links, dict) else None
    first = own[0] if isinstance(own, list) and own else None
    href = first.get("href") if isinstance(first, dict) else None
    if not isinstance(href, str):
        return None
    try:
        parts = urlsplit(href)
    except ValueError:  # an unreadable address (a bracket not closed) names no store
        return None
    path, prefix, _ = parts.path.partition("/wp-json/")
    if not prefix and "rest_route=" not in parts.query:
        return None  # not a REST link: names no store Sill can read
    home = path.removesuffix("/").removesuffix("/index.php")
    return f"//{parts.netloc}{home}"


def same_store(url: str, store_url: str) -> bool:
    """Whether ``url`` (a link's store, ``X-WC-Webhook-Source``) is the store at
    ``store_url``, compared as :func:`_store_key` reads them."""
    return _store_key(url) == _store_key(store_url)


def _order_id(value: Any) -> int:
    """A Woo order id: a positive integer (or its ASCII digits) a signed record holds.
    ``int()`` alone took ``true`` as order 1 and ``-5``; past 2**63 the insert failed on
    every attempt, and past 2**53 - 1 the charge's signed record."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_ORDER_ID:
        raise ValueError("not an order id")
    return value


def parse_order(order: dict[str, Any]) -> WooOrder:
    try:
        order_id = _order_id(order["id"])
        currency = str(order["currency"]).upper()
        total = parse_major(str(order["total"]), currency)
    except (KeyError, TypeError, ValueError, MoneyError) as exc:
        raise UnreadableOrder(f"not a WooCommerce order: {type(exc).__name__}") from None
    try:
        recordable(total)
    except MoneyError as exc:
        raise UnreadableOrder(f"total {order['total']!r}: {exc}") from None
    if total.amount_minor < 0:
        raise UnreadableOrder(f"negative total {order['total']!r}")
    # Lists, or nothing: a number here raised TypeError, which neither the sync nor a
    # webhook's processing expects (the sync ended, the event failed until it was given up).
    for key in ("meta_data", "line_items"):
        if not isinstance(order.get(key) or [], list):
            raise UnreadableOrder(f"{key} is not a list")
    transaction = str(order.get("transaction_id") or "")
    intent = _meta(order, "_stripe_intent_id") or (
        transaction if transaction.startswith("pi_") else ""
    )
    charge = _meta(order, "_stripe_charge_id") or (
        transaction if transaction.startswith(("ch_", "py_")) else ""
    )
    # Stripe's ids are short; a longer one failed the charge's insert on every attempt.
    for what, value in (("charge", charge), ("payment intent", intent)):
        if len(value) > STRIPE_ID_MAX:
            raise UnreadableOrder(f"its Stripe {what} id is longer than {STRIPE_ID_MAX} characters")
    raw_billing = order.get("billing")
    billing: dict[str, Any] = raw_billing if isinstance(raw_billing, dict) else {}
    lines = []
    for item in order.get("line_items") or []:
        if not isinstance(item, dict):
            continue
        try:
            quantity = max(int(item.get("quantity") or 1), 1)
        except (TypeError, ValueError, OverflowError):
            quantity = 0  # unreadable ("two", "2.5"): one line for the lot, below
        try:
            line_total = parse_major(str(item.get("total") or "0"), currency)
        except MoneyError:
            continue
        if not 0 < quantity <= MAX_QUANTITY or line_total.amount_minor % quantity:
            # A price that does not divide evenly: one line for the lot, exact in total.
            lines.append(
                WooLine(
                    str(item.get("sku") or "")[:100],
                    f"{item.get('name') or 'Item'} x {item.get('quantity')}"[:300],
                    1,
                    line_total,
                )
            )
            continue
        unit = Money(line_total.amount_minor // quantity, currency)
        lines.append(
            WooLine(
                str(item.get("sku") or "")[:100],
                str(item.get("name") or "Item")[:300],
                quantity,
                unit,
            )
        )
    created = _time(order.get("date_created_gmt")) or datetime.now(UTC)
    return WooOrder(
        id=order_id,
        number=str(order.get("number") or order_id)[:40],
        status=str(order.get("status") or ""),
        total=total,
        created_at=created,
        modified_at=_time(order.get("date_modified_gmt")),
        paid_at=_time(order.get("date_paid_gmt")),
        email=str(billing.get("email") or "")[:254],
        name=" ".join(str(billing.get(k) or "") for k in ("first_name", "last_name")).strip()[:200],
        payment_method=str(order.get("payment_method") or ""),
        stripe_payment_intent=intent,
        stripe_charge=charge,
        lines=lines,
    )
