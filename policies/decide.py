"""The decision step of the refund pipeline.

For now the only policy is the baseline ``v1-default``, which never holds or denies a refund.
The seam is deliberate: ``decide_refund`` takes the facts Sill read (never the caller's) and
answers an action plus the rules that fired, so the policy engine can replace the body
without touching the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sill.accounts.models import Agent, Site
    from sill.money import Money
    from sill.orders.models import Charge, Order

Action = Literal["allow", "require_approval", "deny"]
BASELINE_VERSION = "v1-default"


@dataclass(frozen=True)
class FiredRule:
    id: str
    action: Action
    mode: Literal["enforced", "observe"] = "enforced"

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "action": self.action, "mode": self.mode}


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


def decide_refund(context: RefundContext) -> PolicyOutcome:
    """Baseline ``v1-default``: allow, with the facts recorded for the decision record."""
    facts = {
        "refundAmount": context.amount.amount_minor,
        "currency": context.amount.currency,
        "rail": context.charge.rail,
        "refundOrigin": context.origin,
        "refundReason": context.reason or "none",
        "agentPlacedOriginal": bool(
            context.agent is not None and context.order.placed_by_agent_id == context.agent.pk
        ),
    }
    return PolicyOutcome(action="allow", policy_version=BASELINE_VERSION, facts=facts)
