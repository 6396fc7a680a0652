"""The facts a refund rule can read, and how a fact snapshot is written down.

Pure: no ORM. ``policies.facts`` computes the values; the evaluator reads them back through
:func:`policies.engine.prepare_facts`.

A fact snapshot (``Refund.facts``, and the ``facts`` of the audit decision record) is a flat
JSON object holding only ints, strings, bools, ``None`` and two small objects, never floats
or decimals (the audit log refuses them, and money must stay exact):

* a known value: the value itself. Money is an integer count of minor units
  (``refundAmount`` in the refund's currency, ``…Usd`` facts in US cents);
* an unknown value: ``null`` (the rail could not say: no customer, a failed read, …);
* a truncated lower bound: ``{"value": 100, "truncated": true}`` (the customer's 90-day
  history filled the one page of 100 charges Sill reads: the real figure is at least this);
* the share refunded: ``{"num": 4450, "den": 8900}``, an exact fraction (0.5 here).

``factsVersion`` marks a complete snapshot. Refunds stored without it (before the engine)
are counted apart by the preview, with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sill.money import Money, MoneyError, format_money

FACTS_VERSION = 1

Kind = Literal["amount", "usd", "days", "count", "ratio", "bool", "enum", "text"]
NUMERIC_KINDS: frozenset[str] = frozenset({"amount", "usd", "days", "count", "ratio"})
INTEGER_KINDS: frozenset[str] = frozenset({"amount", "usd", "days", "count"})

# Kept in step with sill.orders.models.Rail (a test checks it); this module imports no models.
RAIL_NAMES: tuple[str, ...] = ("mock", "stripe", "shopify", "woocommerce", "paypal")


@dataclass(frozen=True)
class FactSpec:
    name: str
    kind: Kind
    label: str
    help: str
    values: tuple[str, ...] = ()  # the allowed values of an ``enum`` fact
    truncatable: bool = False  # may be a lower bound (one page of the customer's history)


_SPECS: tuple[FactSpec, ...] = (
    FactSpec(
        "refundAmount",
        "amount",
        "Refund amount",
        "The amount of this refund in minor units of its currency (8900 is 89.00 USD).",
    ),
    FactSpec(
        "refundAmountUsd",
        "usd",
        "Refund amount in USD",
        "The refund in US cents through Sill's rate table, rounded up; unknown without a rate.",
    ),
    FactSpec(
        "refundFraction",
        "ratio",
        "Share of the charge refunded",
        "What the charge will have had refunded with this refund, counting earlier refunds, "
        "as a share from 0 to 1 (a full refund of an unrefunded charge is 1).",
    ),
    FactSpec(
        "refundChargeAgeDays",
        "days",
        "Charge age (days)",
        "Whole days since the rail created the charge, on Sill's clock.",
    ),
    FactSpec(
        "refundWindowDaysLeft",
        "days",
        "Days left to refund",
        "Whole days left before the tightest refund window closes: the rail's (PayPal: 180 "
        "days from payment) or the merchant's own (Rules → Refund window); unknown when no "
        "window applies or the payment date is unknown.",
    ),
    FactSpec(
        "refundCustomerAgeDays",
        "days",
        "Customer age (days)",
        "Whole days since the rail created the customer; unknown for a guest or a deleted "
        "customer.",
    ),
    FactSpec(
        "refundCustomerCount90d",
        "count",
        "Customer's refunded charges (90 days)",
        "The customer's charges of the last 90 days, in the refund's currency, that carry a "
        "refund (a charge refunded twice counts once). One page of 100 is read: more is a "
        "lower bound.",
        truncatable=True,
    ),
    FactSpec(
        "refundCustomerAmount90dUsd",
        "usd",
        "Customer's refunded amount in USD (90 days)",
        "What was refunded on those charges, in US cents, rounded up. A lower bound when the "
        "history was truncated.",
        truncatable=True,
    ),
    FactSpec(
        "refundCustomerRefunds30d",
        "count",
        "Customer's Sill refunds (30 days)",
        "Refunds Sill recorded for this customer in the last 30 days (held, in progress or "
        "refunded), this one not included.",
    ),
    FactSpec(
        "refundAgentTotalTodayUsd",
        "usd",
        "Agent's refunds today in USD",
        "This agent's refunds since midnight in the site's time zone, this one included, in "
        "US cents. Unknown for staff refunds.",
    ),
    FactSpec(
        "refundDisputed",
        "bool",
        "Charge disputed",
        "Whether the charge is disputed (the rail says so, or Sill has an open or lost "
        "dispute on it: a lost one means the bank already gave the buyer the money back).",
    ),
    FactSpec(
        "refundReason",
        "text",
        "Reason",
        "The agent's reason code or the staff reason's code; none when no reason was given.",
    ),
    FactSpec(
        "refundOrigin",
        "enum",
        "Origin",
        "Who asked: an agent or staff.",
        values=("agent", "staff"),
    ),
    FactSpec(
        "agentPlacedOriginal",
        "bool",
        "Agent placed the order",
        "The agent asking for the refund is the agent that placed the original order.",
    ),
    FactSpec(
        "creditCustomerAgeDays",
        "days",
        "Credited customer's age (days)",
        "Customer credits only: whole days since the rail created the customer whose balance "
        "is credited; unknown when the rail could not say.",
    ),
    FactSpec("rail", "enum", "Rail", "The rail that took the payment.", values=RAIL_NAMES),
    FactSpec("currency", "text", "Currency", "The refund's ISO 4217 currency code."),
)

FACTS: dict[str, FactSpec] = {spec.name: spec for spec in _SPECS}
FACT_NAMES: tuple[str, ...] = tuple(FACTS)


def truncated(value: int) -> dict[str, Any]:
    """A lower bound: the real figure is at least ``value``."""
    return {"value": value, "truncated": True}


def ratio(num: int, den: int) -> dict[str, int] | None:
    """The exact share ``num / den``; unknown (None) when there is nothing to divide by."""
    if den <= 0:
        return None
    return {"num": num, "den": den}


_BOUND_SIGNS = {"gte": "≥", "gt": ">", "lte": "≤", "lt": "<"}


def one_currency(when: Mapping[str, Any]) -> str | None:
    """The one currency a rule's conditions name (``"currency": "EUR"``, or a list of one),
    whose minor units its Refund amount bounds count; None when it names none or several."""
    currency = when.get("currency")
    if isinstance(currency, list) and len(currency) == 1:
        currency = currency[0]
    return currency if isinstance(currency, str) else None


def describe_condition(fact: str, cond: Any, currency: str | None = None) -> str:
    """One condition of a rule as a sentence fragment: "Refund amount in USD > $50.00";
    ``currency``: the rule's one currency (``one_currency``), which a Refund amount bound is
    money in ("Refund amount > €100.00")."""
    spec = FACTS.get(fact)
    label = spec.label if spec else fact
    if isinstance(cond, dict):
        bounds = [f"{_BOUND_SIGNS.get(k, k)} {_show(spec, v, currency)}" for k, v in cond.items()]
        return f"{label} {' and '.join(bounds)}"
    if isinstance(cond, list):
        return f"{label} is {' or '.join(_show(spec, v, currency) for v in cond)}"
    return f"{label} is {_show(spec, cond, currency)}"


def amount_words(value: Any, currency: str | None) -> str:
    """A Refund amount bound: money in the rule's one currency, else the count of minor units
    it is (each refund's own currency's)."""
    if currency and isinstance(value, int) and not isinstance(value, bool):
        try:
            return format_money(Money(value, currency))
        except MoneyError:
            pass
    return f"{value} (minor units)"


def _show(spec: FactSpec | None, value: Any, currency: str | None = None) -> str:
    kind = spec.kind if spec else "text"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if kind == "usd" and isinstance(value, int):
        return format_money(Money(value, "USD"))
    if kind == "amount":
        return amount_words(value, currency)
    if kind == "ratio":
        return format((Decimal(str(value)) * 100).normalize(), "f") + "%"
    if kind == "days":
        return f"{value} day{'s' if value != 1 else ''}"
    if kind in ("text", "enum"):
        return f"“{value}”"
    return str(value)
