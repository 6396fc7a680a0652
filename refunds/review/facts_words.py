"""A refund's policy facts as words for whoever decides it. Pure: no ORM, no clock.

``Refund.facts`` is the snapshot the rules read (``policies.vocabulary``): minor units, US
cents, fractions as ``{"num", "den"}``, lower bounds as ``{"value", "truncated"}``, ``None``
for unknown. :func:`fact_phrases` turns it into short phrases ("100% of the order", "paid
3 days ago", "first refund for this customer in 30 days", "the agent placed the order") that
the held pages join with " · "; :func:`raw_facts` keeps every fact, labelled, for the folded
"the facts as recorded" list. A fact no table here knows falls back to its humanized name and
value, so a new fact never shows as a bare code and never breaks the page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from policies.vocabulary import FACTS
from refunds.labels import REASON_LABELS, fact_value, humanize, percent_text, rail_label
from sill.money import Money, MoneyError, format_money

# Facts that say nothing a decider needs as a sentence (bookkeeping, or said elsewhere).
SILENT = frozenset({"factsVersion", "currency", "refundAmount"})


@dataclass(frozen=True)
class RawFact:
    key: str
    label: str
    value: str


def fact_phrases(facts: Mapping[str, Any], *, credit: bool = False) -> list[str]:
    """The facts as phrases, most telling first; unknown values said as unknown. ``credit``:
    the facts of a customer credit, which pays nothing back on a charge."""
    phrases: list[str] = []
    words_for = {**_PHRASES, **_CREDIT_PHRASES} if credit else _PHRASES
    currency = facts.get("currency") if isinstance(facts.get("currency"), str) else None
    # The decider's order (the stored JSON's key order is the database's, not ours), then
    # any fact this module does not know yet.
    keys = [k for k in _PHRASES if k in facts] + [k for k in facts if k not in _PHRASES]
    for key in keys:
        if key in SILENT:
            continue
        value = facts[key]
        words = words_for.get(key)
        phrase = words(value, facts) if words else _fallback(key, value, currency)
        if phrase:
            phrases.append(phrase)
    return phrases


def raw_facts(facts: Mapping[str, Any]) -> list[RawFact]:
    """Every fact with its vocabulary label and its value as stored (JSON-ish text)."""
    currency = facts.get("currency") if isinstance(facts.get("currency"), str) else None
    return [
        RawFact(key=key, label=_label(key), value=fact_value(key, value, currency))
        for key, value in facts.items()
    ]


# --- one fact at a time ------------------------------------------------------------------

Phrase = Callable[[Any, Mapping[str, Any]], str]


def _label(key: str) -> str:
    spec = FACTS.get(key)
    if spec is not None:
        return spec.label
    return humanize_key(key)


def humanize_key(key: str) -> str:
    """``refundSomethingNew`` → ``Refund something new`` (a fact the vocabulary lacks)."""
    out: list[str] = []
    for char in key:
        if char.isupper() and out:
            out.append(" ")
        out.append(char.lower())
    return humanize("".join(out).replace("_", " "))


def _fallback(key: str, value: Any, currency: str | None) -> str:
    return f"{_label(key).lower()}: {fact_value(key, value, currency)}"


def _bound(value: Any) -> tuple[int | None, bool]:
    """An int fact, or a truncated lower bound: ``(number, at_least)``."""
    if isinstance(value, dict) and isinstance(value.get("value"), int):
        return value["value"], bool(value.get("truncated"))
    if isinstance(value, int) and not isinstance(value, bool):
        return value, False
    return None, False


def _usd(cents: Any) -> str | None:
    number, _ = _bound(cents)
    if number is None:
        return None
    try:
        return format_money(Money(number, "USD"))
    except MoneyError:
        return None


def _fraction(value: Any, _facts: Mapping[str, Any]) -> str:
    if not (isinstance(value, dict) and isinstance(value.get("num"), int)):
        return "share of the order unknown"
    den = value.get("den")
    if not isinstance(den, int) or den <= 0:
        return "share of the order unknown"
    percent = (Decimal(value["num"]) * 100 / den).quantize(Decimal("0.1"), ROUND_HALF_UP)
    return f"{percent_text(percent)} of the order"


def _charge_age(value: Any, _facts: Mapping[str, Any]) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "payment date unknown"
    if value <= 0:
        return "paid today"
    if value == 1:
        return "paid yesterday"
    return f"paid {value} days ago"


def _window_left(value: Any, _facts: Mapping[str, Any]) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return ""  # no refund window applies
    if value <= 0:
        return "the refund window closes today"
    return f"{value} day{'s' if value != 1 else ''} left in the refund window"


def _customer_age(value: Any, _facts: Mapping[str, Any]) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "a guest or unknown customer"
    if value <= 0:
        return "a new customer (since today)"
    return f"a customer for {value} day{'s' if value != 1 else ''}"


def _credited_customer_age(value: Any, _facts: Mapping[str, Any]) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "credited customer's age unknown"
    if value <= 0:
        return "credited customer new since today"
    return f"credited customer known to Stripe for {value} day{'s' if value != 1 else ''}"


def _refunded_charges_90d(value: Any, _facts: Mapping[str, Any]) -> str:
    number, at_least = _bound(value)
    if number is None:
        return "refund history unknown"
    if number == 0:
        return "no refunded charges in 90 days"
    more = "at least " if at_least else ""
    return f"{more}{number} refunded charge{'s' if number != 1 else ''} in 90 days"


def _refunded_amount_90d(value: Any, _facts: Mapping[str, Any]) -> str:
    shown = _usd(value)
    number, at_least = _bound(value)
    if shown is None or not number:
        return ""  # said by the count above
    return f"{'at least ' if at_least else ''}{shown} refunded to them in 90 days"


def _refunds_30d(value: Any, _facts: Mapping[str, Any]) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "earlier refunds unknown"
    if value == 0:
        return "first refund for this customer in 30 days"
    return f"{value} earlier refund{'s' if value != 1 else ''} for this customer in 30 days"


def _agent_today(value: Any, facts: Mapping[str, Any]) -> str:
    shown = _usd(value)
    if shown is None:
        return ""  # a staff refund: no agent total
    return f"{shown} refunded by this agent today, this one included"


def _amount_usd(value: Any, facts: Mapping[str, Any]) -> str:
    if facts.get("currency") == "USD":
        return ""  # the amount is already in dollars
    shown = _usd(value)
    return f"about {shown} in US dollars" if shown else "no US-dollar rate"


def _disputed(value: Any, _facts: Mapping[str, Any]) -> str:
    if value is True:
        return "the charge is disputed"
    if value is False:
        return "no dispute"
    return "dispute status unknown"


def _reason(value: Any, _facts: Mapping[str, Any]) -> str:
    if not value or value == "none":
        return "no reason given"
    return f"reason: {REASON_LABELS.get(str(value), humanize(str(value)))}"


def _origin(value: Any, _facts: Mapping[str, Any]) -> str:
    return {"agent": "asked by an agent", "staff": "asked by a staff member"}.get(
        str(value), f"asked by {value}"
    )


def _agent_placed(value: Any, facts: Mapping[str, Any]) -> str:
    if value is True:
        return "the agent placed the order"
    if value is False and facts.get("refundOrigin") == "agent":
        return "someone else placed the order"
    return ""


def _rail(value: Any, _facts: Mapping[str, Any]) -> str:
    return f"paid on {rail_label(str(value))}" if value else ""


def _agent_today_credit(value: Any, facts: Mapping[str, Any]) -> str:
    shown = _usd(value)
    if shown is None:
        return ""
    # The agent's total counts its refunds and its credits alike.
    return f"{shown} refunded or credited by this agent today, this one included"


def _rail_credit(value: Any, _facts: Mapping[str, Any]) -> str:
    return f"credited through {rail_label(str(value))}" if value else ""


_PHRASES: dict[str, Phrase] = {
    "refundFraction": _fraction,
    "refundChargeAgeDays": _charge_age,
    "refundWindowDaysLeft": _window_left,
    "refundCustomerRefunds30d": _refunds_30d,
    "agentPlacedOriginal": _agent_placed,
    "refundOrigin": _origin,
    "refundReason": _reason,
    "refundDisputed": _disputed,
    "refundCustomerAgeDays": _customer_age,
    "creditCustomerAgeDays": _credited_customer_age,
    "refundCustomerCount90d": _refunded_charges_90d,
    "refundCustomerAmount90dUsd": _refunded_amount_90d,
    "refundAgentTotalTodayUsd": _agent_today,
    "refundAmountUsd": _amount_usd,
    "rail": _rail,
}
# A credit's own words for the facts it shares with refunds.
_CREDIT_PHRASES: dict[str, Phrase] = {
    "refundAgentTotalTodayUsd": _agent_today_credit,
    "rail": _rail_credit,
}
