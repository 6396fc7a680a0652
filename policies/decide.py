"""The decision step of the refund pipeline.

For now the only policy is the baseline ``v1-default``, which never holds or denies a refund.
The seam is deliberate: ``decide_refund`` takes the facts Sill read (never the caller's) and
answers an action plus the rules that fired, so the policy engine can replace the body
without touching the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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


def decide_refund(*, site_id: str, facts: dict[str, Any]) -> PolicyOutcome:
    """Baseline ``v1-default``: allow, with the facts recorded for the decision record."""
    return PolicyOutcome(action="allow", policy_version=BASELINE_VERSION, facts=dict(facts))
