"""Deciding a customer-balance credit: its facts, and the site's rules that apply to credits.

A credit has no order and no charge, so it is judged only by the rules whose facts mean
something for it (``policies.subjects``): the amount (in its currency and in USD), who asked
and why, the agent's total today, the rail, the currency, and ``creditCustomerAgeDays`` (how
long the rail has known the customer). Unknown facts take a rule's restrictive branch, as for
refunds. AUTO-REFUND never applies: it is about orders the agent placed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from policies.engine import evaluate, prepare_facts
from policies.facts import _age_days, _agent_total_today_usd
from policies.rates import usd_minor
from policies.selectors import active_policy_for
from policies.types import PolicyOutcome
from policies.vocabulary import FACTS_VERSION
from sill.accounts.models import Agent, Site
from sill.money import Money


@dataclass(frozen=True)
class CreditContext:
    """A credit as the decision sees it, all from Sill's records and the rail's answer."""

    site: Site
    amount: Money
    agent: Agent | None
    reason: str | None
    now: datetime
    rail: str
    customer_created_at: datetime | None  # what the rail said; None when it could not say
    origin: Literal["agent", "staff"] = "agent"
    # As RefundContext's: the agent's refunds today when already read; None: read by the facts.
    agent_totals_today: list[tuple[str, int]] | None = None


def credit_facts(context: CreditContext) -> dict[str, Any]:
    """The JSON-safe fact snapshot of a credit (the same vocabulary as refunds)."""
    amount = context.amount
    amount_usd = usd_minor(amount.amount_minor, amount.currency)
    return {
        "factsVersion": FACTS_VERSION,
        "refundAmount": amount.amount_minor,
        "refundAmountUsd": amount_usd,
        "creditCustomerAgeDays": _age_days(context.customer_created_at, context.now),
        # Refunds and credits of this agent today, this one included (both move money back).
        "refundAgentTotalTodayUsd": _agent_total_today_usd(context, amount_usd),  # type: ignore[arg-type]
        "refundReason": context.reason or "none",
        "refundOrigin": context.origin,
        "rail": context.rail,
        "currency": amount.currency,
    }


def decide_credit(context: CreditContext) -> PolicyOutcome:
    """Decide ``context`` with the site's active rules that apply to credits."""
    policy = active_policy_for(context.site)
    snapshot = credit_facts(context)
    evaluation = evaluate(policy.credit, prepare_facts(snapshot))
    return PolicyOutcome(
        action=evaluation.action,
        policy_version=policy.label,
        rules=evaluation.fired,
        facts=snapshot,
        auto_refund=False,
    )
