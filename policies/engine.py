"""The rule evaluator: compiled once per policy version, then pure and fast. No ORM.

Semantics (issue 4, seed "Refund rules"):

* A rule fires when every condition of its ``when`` holds.
* Each condition is three-valued: true, false, or unknown. A fact that is unknown makes its
  condition unknown. A truncated lower bound *proves* a lower bound it already meets
  (``gte``/``gt``: holds), *disproves* an upper bound it already exceeds (``lte``/``lt``:
  false, since the real figure is at least as large), and is unknown otherwise.
* A rule with an unknown condition (and no false one) takes its restrictive branch: a
  ``deny`` or ``require_approval`` rule fires. An ``allow`` rule does not (allowing is never
  the restrictive branch), so it cannot be recorded on a guess.
* Precedence: deny > require_approval > allow. Rules only restrict: the outcome starts at
  ``allow`` and an ``allow`` rule never lowers what another rule asked for.
* ``observe`` rules are evaluated and reported (mode "observe") but never change the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeGuard

from policies.rules import to_fraction
from policies.vocabulary import FACTS, INTEGER_KINDS

Action = Literal["allow", "require_approval", "deny"]
Mode = Literal["enforced", "observe"]
SEVERITY: dict[str, int] = {"allow": 0, "require_approval": 1, "deny": 2}
_BY_SEVERITY: tuple[Action, ...] = ("allow", "require_approval", "deny")

# A prepared numeric value: (numerator, denominator > 0, is a truncated lower bound).
Number = tuple[int, int, bool]
PreparedFacts = dict[str, Any]
Check = Callable[[PreparedFacts], bool | None]


@dataclass(frozen=True)
class FiredRule:
    id: str
    action: Action
    mode: Mode = "enforced"

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "action": self.action, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    severity: int
    enforced: bool
    checks: tuple[Check, ...]
    fired: FiredRule


@dataclass(frozen=True)
class CompiledPolicy:
    rules: tuple[CompiledRule, ...]
    source: tuple[dict[str, Any], ...]  # the validated rules this was compiled from


@dataclass(frozen=True)
class Evaluation:
    action: Action
    fired: tuple[FiredRule, ...]


@dataclass(frozen=True)
class AutoRefund:
    """Auto-approve refunds rules would hold, up to ``cap_minor`` of ``currency``."""

    enabled: bool = False
    cap_minor: int = 0
    currency: str = "USD"


def compile_policy(rules: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> CompiledPolicy:
    """Compile *validated* rules (see :func:`policies.rules.validate_rules`)."""
    compiled = []
    for rule in rules:
        action: Action = rule["then"]["action"]
        mode: Mode = rule.get("mode", "enforced")
        checks = tuple(_compile_condition(fact, cond) for fact, cond in rule["when"].items())
        compiled.append(
            CompiledRule(
                id=rule["id"],
                severity=SEVERITY[action],
                enforced=mode == "enforced",
                checks=checks,
                fired=FiredRule(rule["id"], action, mode),
            )
        )
    return CompiledPolicy(rules=tuple(compiled), source=tuple(rules))


def evaluate(policy: CompiledPolicy, facts: PreparedFacts) -> Evaluation:
    """The outcome of ``policy`` on prepared facts (see :func:`prepare_facts`)."""
    worst = 0
    fired: list[FiredRule] = []
    for rule in policy.rules:
        result: bool | None = True
        for check in rule.checks:
            value = check(facts)
            if value is False:
                result = False
                break
            if value is None:
                result = None
        if result is False or (result is None and rule.severity == 0):
            continue
        fired.append(rule.fired)
        if rule.enforced and rule.severity > worst:
            worst = rule.severity
    return Evaluation(action=_BY_SEVERITY[worst], fired=tuple(fired))


def apply_auto_refund(
    action: Action, auto: AutoRefund, snapshot: Mapping[str, Any]
) -> tuple[Action, bool]:
    """AUTO-REFUND: approve what rules would hold when it is small and from the placing agent.

    Only a ``require_approval`` outcome is lifted (never a deny), only for an agent refund
    whose agent placed the original order, and only at or under the cap in the cap's own
    currency: a refund in another currency is not compared through a rate, so it stays held.
    """
    if action != "require_approval" or not auto.enabled:
        return action, False
    if snapshot.get("refundOrigin") != "agent" or snapshot.get("agentPlacedOriginal") is not True:
        return action, False
    amount = snapshot.get("refundAmount")
    if snapshot.get("currency") != auto.currency or not _is_int(amount):
        return action, False
    if amount > auto.cap_minor:
        return action, False
    return "allow", True


def prepare_facts(snapshot: Mapping[str, Any]) -> PreparedFacts:
    """Read a stored snapshot back into the evaluator's values; anything malformed is unknown."""
    prepared: PreparedFacts = {}
    for name, spec in FACTS.items():
        raw = snapshot.get(name)
        value: Any = None
        if raw is None:
            pass
        elif spec.kind in INTEGER_KINDS:
            if _is_int(raw):
                value = (raw, 1, False)
            elif (
                spec.truncatable
                and isinstance(raw, Mapping)
                and raw.get("truncated") is True
                and _is_int(raw.get("value"))
            ):
                value = (raw["value"], 1, True)
        elif spec.kind == "ratio":
            if isinstance(raw, Mapping):
                num, den = raw.get("num"), raw.get("den")
                if _is_int(num) and _is_int(den) and den > 0:
                    value = (num, den, False)
            elif _is_int(raw):
                value = (raw, 1, False)
        elif spec.kind == "bool":
            value = raw if isinstance(raw, bool) else None
        elif isinstance(raw, str):
            value = raw
        prepared[name] = value
    return prepared


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- compiling conditions into checks ---------------------------------------------------------


def _compile_condition(fact: str, cond: Any) -> Check:
    spec = FACTS[fact]
    if isinstance(cond, Mapping):
        return _range_check(fact, cond)
    values = cond if isinstance(cond, list) else [cond]
    if spec.kind in INTEGER_KINDS or spec.kind == "ratio":
        return _number_in_check(fact, [to_fraction(v) for v in values])
    allowed = frozenset(values)

    def check_in(facts: PreparedFacts) -> bool | None:
        value = facts.get(fact)
        if value is None:
            return None
        return value in allowed

    return check_in


def _range_check(fact: str, cond: Mapping[str, Any]) -> Check:
    low_key = "gt" if "gt" in cond else "gte" if "gte" in cond else None
    high_key = "lt" if "lt" in cond else "lte" if "lte" in cond else None
    low = to_fraction(cond[low_key]) if low_key else None
    high = to_fraction(cond[high_key]) if high_key else None
    # Bounds as integer pairs: value >= p/q  <=>  num * q >= p * den (den > 0). No floats.
    lp, lq = (low.numerator, low.denominator) if low is not None else (0, 1)
    hp, hq = (high.numerator, high.denominator) if high is not None else (0, 1)
    low_strict = low_key == "gt"
    high_strict = high_key == "lt"
    has_low = low is not None
    has_high = high is not None

    def check_range(facts: PreparedFacts) -> bool | None:
        value: Number | None = facts.get(fact)
        if value is None:
            return None
        num, den, is_lower_bound = value
        if has_high:
            a, b = num * hq, hp * den
            if a >= b if high_strict else a > b:
                # Even a lower bound above the upper bound settles it: the real value is larger.
                return False
        if has_low:
            a, b = num * lq, lp * den
            if not (a > b if low_strict else a >= b):
                # A lower bound that does not reach the bound says nothing: unknown.
                return None if is_lower_bound else False
        if is_lower_bound and has_high:
            # The bound read is under the ceiling, but the real figure may not be.
            return None
        return True

    return check_range


def _number_in_check(fact: str, values: list[Fraction]) -> Check:
    allowed = frozenset(values)
    largest = max(values)

    def check_number_in(facts: PreparedFacts) -> bool | None:
        value: Number | None = facts.get(fact)
        if value is None:
            return None
        num, den, is_lower_bound = value
        if is_lower_bound:
            # The real figure is at least num: above every listed value it matches none.
            return False if Fraction(num, den) > largest else None
        return (num if den == 1 else Fraction(num, den)) in allowed

    return check_number_in


BASELINE_POLICY = compile_policy([])
