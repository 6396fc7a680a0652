"""PayPal's refund and dispute resources in Sill's words, as its webhooks deliver them
(sill.rails.paypal.events) and as the rail lists them for reconciliation
(sill.rails.paypal.rail): one reading of each shape for both.

The fields of PayPal's answers are read here, through :func:`listed`, :func:`objects` and
:func:`part`: a field of another shape than PayPal's (a list that is a number, an object or
null) is ``PayPalUnreadable``, the rail's error for an answer it cannot read, never a
``TypeError`` and never an empty list (which would say "no refunds", "no disputes"). A list or
object PayPal leaves out is empty: PayPal omits empty ones.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from sill.money import Money, MoneyError, parse_major, recordable
from sill.rails.base import SILL_REFUND_ID, RailName, RailRefund, amount_step, check_step
from sill.rails.paypal.client import PayPalUnreadable

# The longest provider id Sill's columns hold (a refund's, a dispute's).
MAX_ID_CHARS = 255

# PayPal's refund statuses in the words Sill's refund core reads (Stripe's words).
REFUND_STATES = {
    "COMPLETED": "succeeded",
    "PENDING": "pending",
    "CANCELLED": "canceled",
    "FAILED": "failed",
}


def listed(resource: dict[str, Any], key: str, *, what: str) -> list[Any]:
    """``resource[key]``, one of PayPal's lists (``what``: whose, for the error): ``[]`` when
    PayPal leaves it out; ``PayPalUnreadable`` when it is anything but a list."""
    if key not in resource:
        return []
    found = resource[key]
    if not isinstance(found, list):
        raise unreadable(what, key, found, "a list")
    return found


def objects(resource: dict[str, Any], key: str, *, what: str) -> list[dict[str, Any]]:
    """:func:`listed`, each of its entries an object (links, purchase units, refunds)."""
    found = listed(resource, key, what=what)
    for entry in found:
        if not isinstance(entry, dict):
            raise unreadable(what, f"an entry of {key}", entry, "an object")
    return found


def part(resource: dict[str, Any], key: str, *, what: str) -> dict[str, Any]:
    """``resource[key]``, one of PayPal's objects: ``{}`` when PayPal leaves it out;
    ``PayPalUnreadable`` when it is anything but an object."""
    if key not in resource:
        return {}
    found = resource[key]
    if not isinstance(found, dict):
        raise unreadable(what, key, found, "an object")
    return found


def text(resource: dict[str, Any], key: str, *, what: str) -> str:
    """``resource[key]``, one of PayPal's strings: ``""`` when PayPal leaves it out or sends
    null (no text); ``PayPalUnreadable`` when it is anything else but a string."""
    found = resource.get(key)
    if found is None:
        return ""
    if not isinstance(found, str):
        raise unreadable(what, key, found, "a string")
    return found


def identifier(resource: dict[str, Any], key: str, *, what: str) -> str:
    """``resource[key]``, the id of one of PayPal's resources: a string of 1 to
    ``MAX_ID_CHARS`` characters (what Sill's columns hold), else ``PayPalUnreadable``."""
    found = resource.get(key)
    if not isinstance(found, str) or not 0 < len(found) <= MAX_ID_CHARS:
        raise unreadable(what, key, found, "an id")
    return found


def unreadable(what: str, key: str, value: Any, wanted: str) -> PayPalUnreadable:
    """The error for ``what``'s field ``key``, which is ``value`` where PayPal sends ``wanted``;
    it names the value's shape, never the value (it may be long, or a buyer's words)."""
    return PayPalUnreadable(
        f"PayPal's {what} is unreadable: its {key} is {_shape(value)}, not {wanted}"
    )


def _shape(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return "a list" if isinstance(value, list) else "an object"


def amount(value: Any) -> tuple[int, str] | None:
    """``{"value": "12.50", "currency_code": "USD"}`` → ``(1250, "USD")``; None if unreadable."""
    if not isinstance(value, dict):
        return None
    currency = str(value.get("currency_code") or "").upper()
    try:
        money = recordable(parse_major(str(value.get("value")), currency))
    except MoneyError:
        return None
    return money.amount_minor, money.currency


def money_value(money: Money) -> str:
    """``money`` as PayPal's ``amount.value``: ``"12.50"`` USD, ``"1200"`` JPY, and ``"1000"``
    HUF or TWD, which PayPal takes without decimals (``"1000.00"`` is refused,
    DECIMALS_NOT_SUPPORTED); ``OffStep`` for a part of a forint, which it cannot take at all."""
    check_step(RailName.PAYPAL, money)
    step = amount_step(RailName.PAYPAL, money.currency)
    if step == 1:
        return money.major_str()
    # Whole units of a step of 10**k minor units: the currency's decimals less k.
    places = money.exponent - (len(str(step)) - 1)
    return f"{money.amount.quantize(Decimal(1).scaleb(-places)):f}"


def time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def capture_of(refund: dict[str, Any], *, held: bool = True) -> str:
    """The capture id named by the refund's ``up`` link (``…/v2/payments/captures/{id}``).

    ``held``: the refund as PayPal's API answers it, whose links of another shape are
    ``PayPalUnreadable`` (read as "no capture", the event was processed as naming another
    capture, recording nothing for good). Not held: a webhook's body, which only names what to
    read (PayPal signs a CRC32 of it): its links of another shape name no capture."""
    links = refund.get("links")
    if held:
        links = objects(refund, "links", what="refund")
    for link in links if isinstance(links, list) else []:
        if isinstance(link, dict) and link.get("rel") == "up":
            parts = urlsplit(str(link.get("href") or "")).path.rstrip("/").split("/")
            if len(parts) >= 2 and parts[-2] == "captures":
                return parts[-1]
    return ""


def disputed_captures(dispute: dict[str, Any], *, held: bool = True) -> list[str]:
    """The capture ids of the dispute's ``disputed_transactions`` (``held`` as for
    :func:`capture_of`: PayPal's answer, whose list of another shape is unreadable)."""
    listed = dispute.get("disputed_transactions")
    if held:
        listed = objects(dispute, "disputed_transactions", what="dispute")
    return [
        capture_id
        # A number here (the event's body is not PayPal's word) raised on every attempt.
        for t in (listed if isinstance(listed, list) else [])
        if isinstance(t, dict) and (capture_id := str(t.get("seller_transaction_id") or ""))
    ]


def rail_refund(refund: dict[str, Any], *, default_time: datetime) -> RailRefund:
    """One PayPal refund as Sill reads a rail's. ``PayPalUnreadable`` when Sill cannot read
    it (no id, no positive amount of a currency Sill knows, a field of another shape): left
    out, it was a refund PayPal made that Sill counted as none. ``sill_refund_id``: its
    ``custom_id`` when that is one of Sill's refund ids."""
    refund_id = identifier(refund, "id", what="refund")
    money = amount(refund.get("amount"))
    if money is None or money[0] <= 0:
        raise PayPalUnreadable(
            f"PayPal's refund {refund_id} is unreadable: its amount is not a positive amount "
            "of a currency Sill knows"
        )
    custom_id = text(refund, "custom_id", what="refund")
    details = part(refund, "status_details", what="refund")
    return RailRefund(
        provider_refund_id=refund_id,
        amount_minor=money[0],
        currency=money[1],
        status=REFUND_STATES.get(text(refund, "status", what="refund") or "COMPLETED", "pending"),
        created_at=time(refund.get("create_time")) or default_time,
        sill_refund_id=custom_id if SILL_REFUND_ID.fullmatch(custom_id) else "",
        reason=text(refund, "note_to_payer", what="refund"),
        failure_reason=text(details, "reason", what="refund's status details"),
    )


def dispute_money(dispute: dict[str, Any]) -> tuple[int | None, str]:
    """The dispute's ``dispute_amount`` as ``(minor units, currency)``; ``(None, "")`` when
    Sill cannot read it (missing, not an amount of a currency Sill knows, negative, past what
    a signed record holds): the dispute is recorded all the same, its amount not known."""
    money = amount(dispute.get("dispute_amount"))
    if money is None or money[0] < 0:
        return None, ""
    return money


def dispute_reason(dispute: dict[str, Any]) -> str:
    """The dispute's ``reason``; ``"general"`` when PayPal does not say it (left out, or of
    another shape, whose Python text the refusal named in words)."""
    said = dispute.get("reason")
    return said if isinstance(said, str) and said else "general"


def dispute_word(dispute: dict[str, Any]) -> str:
    """The dispute's status as sill.rails.dispute_states reads PayPal's: a resolved one carries
    its outcome after a colon (``RESOLVED:RESOLVED_SELLER_FAVOUR``), since RESOLVED alone
    does not say who won."""
    said = dispute.get("status")
    # A status of another shape says nothing: OPEN, as one left out (it refuses refunds).
    status = (said if isinstance(said, str) and said else "OPEN").upper()
    found = dispute.get("dispute_outcome")
    # An outcome of another shape says nothing: RESOLVED alone, read as lost.
    outcome = str((found if isinstance(found, dict) else {}).get("outcome_code") or "").upper()
    return f"RESOLVED:{outcome}" if status == "RESOLVED" and outcome else status
