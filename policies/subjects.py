"""Which rules apply to what: refunds of a charge, or credits to a customer's balance.

A rule applies to a **credit** only when every fact it reads means something for a credit
(the amount, who asked, the reason, the agent's total today, the rail, the currency, the
credited customer's age): a rule about the charge (its age, the share refunded, a dispute)
cannot be judged for a credit, and would otherwise take its restrictive branch on every one.
A rule applies to a **refund** unless it reads a credit-only fact, for the same reason the
other way round. Pure: no ORM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

Subject = Literal["refund", "credit"]

CREDIT_ONLY_FACTS: frozenset[str] = frozenset({"creditCustomerAgeDays"})
CREDIT_FACTS: frozenset[str] = CREDIT_ONLY_FACTS | {
    "refundAmount",
    "refundAmountUsd",
    "refundAgentTotalTodayUsd",
    "refundReason",
    "refundOrigin",
    "rail",
    "currency",
}


def applies(rule: Mapping[str, Any], subject: Subject) -> bool:
    facts = set(rule.get("when") or ())
    if subject == "credit":
        return facts <= CREDIT_FACTS
    return not facts & CREDIT_ONLY_FACTS


def rules_for(rules: Iterable[Mapping[str, Any]], subject: Subject) -> list[dict[str, Any]]:
    """The rules of ``rules`` that apply to ``subject``, in their order."""
    return [dict(rule) for rule in rules if applies(rule, subject)]
