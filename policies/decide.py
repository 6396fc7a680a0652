"""The decision step of the refund pipeline: facts → the site's active rules → an outcome.

``decide_refund`` reads the facts Sill computes (never the caller's claims), evaluates the
site's active policy version (compiled once per version), applies AUTO-REFUND, and answers
the action with every rule that fired (observe-mode rules included, marked ``observe``) and
the fact snapshot the refund and its audit decision record store.

A site without a policy version of its own runs the baseline ``v1-default``: no rules, so
nothing is held or denied, and auto-refund off.
"""

from __future__ import annotations

from policies.engine import Action, FiredRule, apply_auto_refund, evaluate, prepare_facts
from policies.facts import read_refund_facts
from policies.selectors import active_policy_for
from policies.types import BASELINE_VERSION, PolicyOutcome, RefundContext

# The boundary types live in policies.types; they stay importable from here too.
__all__ = [
    "BASELINE_VERSION",
    "Action",
    "FiredRule",
    "PolicyOutcome",
    "RefundContext",
    "decide_refund",
]


def decide_refund(context: RefundContext) -> PolicyOutcome:
    """Decide ``context`` with the site's active policy version.

    ``deny`` beats ``require_approval`` beats ``allow``; unknown facts take a rule's
    restrictive branch; observe rules are reported but change nothing. AUTO-REFUND turns a
    ``require_approval`` into ``allow`` (``auto_refund=True``) for an agent refund at or
    under the cap whose agent placed the original order; it never overrides ``deny``.
    """
    policy = context.policy or active_policy_for(context.site)
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
