"""The decision step of the refund pipeline: facts → the site's active rules → an outcome.

``decide_refund`` reads the facts Sill computes (never the caller's claims), evaluates the
site's active policy version (compiled once per version), applies AUTO-REFUND, and answers
the action with every rule that fired (observe-mode rules included, marked ``observe``) and
the fact snapshot the refund and its audit decision record store.

A site without a policy version of its own runs the baseline ``v1-default``: no rules, so
nothing is held or denied, and auto-refund off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from policies.engine import Action, FiredRule, apply_auto_refund, evaluate, prepare_facts

if TYPE_CHECKING:
    from sill.accounts.models import Agent, Site
    from sill.money import Money
    from sill.orders.models import Charge, Order
    from sill.rails.base import RefundFacts

__all__ = [
    "BASELINE_VERSION",
    "Action",
    "FiredRule",
    "PolicyOutcome",
    "RefundContext",
    "decide_refund",
]

BASELINE_VERSION = "v1-default"


@dataclass(frozen=True)
class PolicyOutcome:
    action: Action
    policy_version: str
    rules: tuple[FiredRule, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    auto_refund: bool = False


@dataclass(frozen=True)
class RefundContext:
    """Everything the decision may look at, all from Sill's records (never the caller's claims).

    ``charge`` and ``order`` are locked by the caller; ``amount`` is the quoted amount.
    ``rail_facts``: what the rail reported, read by the caller *before* it took any lock or
    opened its transaction (``policies.facts.prefetch_rail_facts``): a provider's network
    calls must never hold row locks (or SQLite's write lock). When None, they are read here.
    """

    site: Site
    order: Order
    charge: Charge
    amount: Money
    origin: Literal["agent", "staff"]
    agent: Agent | None
    user: Any | None
    reason: str | None  # the agent's reason code or the staff reason's code; None if none
    now: datetime
    rail_facts: RefundFacts | None = None


def decide_refund(context: RefundContext) -> PolicyOutcome:
    """Decide ``context`` with the site's active policy version.

    ``deny`` beats ``require_approval`` beats ``allow``; unknown facts take a rule's
    restrictive branch; observe rules are reported but change nothing. AUTO-REFUND turns a
    ``require_approval`` into ``allow`` (``auto_refund=True``) for an agent refund at or
    under the cap whose agent placed the original order; it never overrides ``deny``.
    """
    # Imported here: these read the database, and refunds.services imports this module.
    from policies.facts import read_refund_facts
    from policies.selectors import active_policy_for

    policy = active_policy_for(context.site)
    snapshot = read_refund_facts(context)
    evaluation = evaluate(policy.compiled, prepare_facts(snapshot))
    action, auto = apply_auto_refund(evaluation.action, policy.auto_refund, snapshot)
    return PolicyOutcome(
        action=action,
        policy_version=policy.label,
        rules=evaluation.fired,
        facts=snapshot,
        auto_refund=auto,
    )
