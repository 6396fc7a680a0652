"""The rule evaluator: compiled once per policy version, then pure and fast. No ORM.

Semantics (issue 4, seed "Refund rules"):

* A rule fires when every condition of its ``when`` holds.
* Each condition is three-valued: true, false, or unknown. A fact that is unknown makes its
  condition unknown. A truncated lower bound *proves* a lower bound it already meets
  (``gte``/``gt``: holds), *disproves* an upper bound it already exceeds (``lte``/``lt``:
  false, since the real figure is at least as large), and is unknown otherwise.
* A stored value that is no value of its fact is unknown, as ``null`` is: a negative amount,
  age, count or share, an empty text, an enum value the fact does not have ("robot" for the
  origin), a value of the wrong type.
* A rule with an unknown condition (and no false one) takes its restrictive branch: a
  ``deny`` or ``require_approval`` rule fires. An ``allow`` rule does not (allowing is never
  the restrictive branch), so it cannot be recorded on a guess.
* Precedence: deny > require_approval > allow. Rules only restrict: the outcome starts at
  ``allow`` and an ``allow`` rule never lowers what another rule asked for.
* ``observe`` rules are evaluated and reported (mode "observe") but never change the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, TypeGuard

from policies.rules import to_fraction
from policies.vocabulary import FACTS, INTEGER_KINDS

Action = Literal["allow", "require_approval", "deny"]
Mode = Literal["enforced", "observe"]
SEVERITY: dict[str, int] = {"allow": 0, "require_approval": 1, "deny": 2}
_BY_SEVERITY: tuple[Action, ...] = ("allow", "require_approval", "deny")
_MAX_CACHED_OUTCOMES = 4096  # distinct sets of fired rules kept per policy


class LowerBound(int):
    """A truncated figure: the real value is at least this (``{"value", "truncated"}``)."""

    __slots__ = ()


class PreparedFacts(dict[str, Any]):
    """A stored snapshot as the checks read it: each fact normalised at most once.

    A check reads the stored value first (``raw``): an integer fact holding a plain int, a
    boolean fact a bool, a text fact a str is already what it compares, so the usual read is
    one dict lookup and no work at all. Anything else (unknown, truncated, the share refunded,
    malformed) goes through :meth:`value` once per evaluation: every rule and, in a preview,
    both policies read the cached result. Prepared values: integer facts an ``int``
    (:class:`LowerBound` when truncated), the share refunded a ``(num, den)`` pair
    (``den > 0``), booleans and text as they are; anything unknown or malformed is ``None``.
    """

    # The dict itself holds the values prepared so far; ``raw`` is the stored snapshot.
    __slots__ = ("raw",)
    raw: Mapping[str, Any]

    def value(self, name: str) -> Any:
        """The prepared value of fact ``name`` (``None`` when unknown or malformed)."""
        if name in self:
            return self[name]
        value = _prepare(name, self.raw.get(name))
        self[name] = value
        return value


# The type of a fact's prepared value, by fact: what most snapshots hold. A check compares a
# stored value of this type at once when it is also a value of the fact (a count not below
# zero, a text not empty, one of an enum's values); anything else is read by ``_prepare``.
_EXACT: dict[str, type] = {
    name: int if spec.kind in INTEGER_KINDS else bool if spec.kind == "bool" else str
    for name, spec in FACTS.items()
    if spec.kind != "ratio"
}
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
    check: Check  # the rule's conditions together: True, False or None (unknown)
    fired: FiredRule


@dataclass(frozen=True)
class Evaluation:
    action: Action
    fired: tuple[FiredRule, ...]


@dataclass(frozen=True)
class CompiledPolicy:
    rules: tuple[CompiledRule, ...]
    source: tuple[dict[str, Any], ...]  # the validated rules this was compiled from
    # (bit, check) of the deny and require_approval rules, then of the allow rules: what
    # :func:`evaluate` runs.
    restrictive: tuple[tuple[int, Check], ...] = field(repr=False, compare=False, default=())
    permissive: tuple[tuple[int, Check], ...] = field(repr=False, compare=False, default=())
    # The Evaluation of each set of fired rules met so far (a bit mask): a decision allocates
    # nothing for the rules that do not fire, and nothing at all for a set seen before.
    outcomes: dict[int, Evaluation] = field(repr=False, compare=False, default_factory=dict)


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
                check=checks[0] if len(checks) == 1 else _all_of(checks),
                fired=FiredRule(rule["id"], action, mode),
            )
        )
    return CompiledPolicy(
        rules=tuple(compiled),
        source=tuple(rules),
        restrictive=tuple((1 << i, r.check) for i, r in enumerate(compiled) if r.severity),
        permissive=tuple((1 << i, r.check) for i, r in enumerate(compiled) if not r.severity),
    )


def evaluate(policy: CompiledPolicy, facts: PreparedFacts) -> Evaluation:
    """The outcome of ``policy`` on prepared facts (see :func:`prepare_facts`).

    A rule fires when its conditions hold (``True``), or when one is unknown (``None``),
    none is false and the rule is restrictive (deny or require_approval).
    """
    fired = 0
    for bit, check in policy.restrictive:
        if check(facts) is not False:  # holds, or unknown: the restrictive branch
            fired |= bit
    for bit, check in policy.permissive:
        if check(facts) is True:  # an allow rule never fires on a guess
            fired |= bit
    outcome = policy.outcomes.get(fired)
    if outcome is None:
        outcome = _outcome(policy, fired)
    return outcome


def _outcome(policy: CompiledPolicy, fired_bits: int) -> Evaluation:
    fired = tuple(rule.fired for i, rule in enumerate(policy.rules) if fired_bits >> i & 1)
    worst = max(
        (
            rule.severity
            for i, rule in enumerate(policy.rules)
            if fired_bits >> i & 1 and rule.enforced
        ),
        default=0,
    )
    outcome = Evaluation(action=_BY_SEVERITY[worst], fired=fired)
    if len(policy.outcomes) < _MAX_CACHED_OUTCOMES:
        policy.outcomes[fired_bits] = outcome
    return outcome


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
    if snapshot.get("currency") != auto.currency or not _is_int(amount) or amount < 0:
        # A negative amount is no amount (unknown, as the rules read it): it stays held.
        return action, False
    if amount > auto.cap_minor:
        return action, False
    return "allow", True


def prepare_facts(snapshot: Mapping[str, Any]) -> PreparedFacts:
    """The evaluator's view of a stored snapshot; anything malformed is unknown.

    Nothing is read until a check asks (see :class:`PreparedFacts`)."""
    facts = PreparedFacts()
    facts.raw = snapshot
    return facts


def _prepare(name: str, raw: Any) -> Any:
    """``raw`` (not already in its prepared form) as the checks read it; ``None`` if unknown."""
    spec = FACTS[name]
    if raw is None:
        return None
    if spec.kind in INTEGER_KINDS:
        if _is_int(raw):  # an int subclass (not bool): the plain int it equals
            # Money, days and counts are never negative: a negative figure is no value of the
            # fact, so it is unknown (read as one, it would pass an upper bound and fail a
            # lower one: a hold on "under 30 days" or "3 refunds or more" skipped).
            return int(raw) if raw >= 0 else None
        if (
            spec.truncatable
            and isinstance(raw, Mapping)
            and raw.get("truncated") is True
            and _is_int(raw.get("value"))
        ):
            return LowerBound(raw["value"])
        return None
    if spec.kind == "ratio":
        if isinstance(raw, Mapping):
            num, den = raw.get("num"), raw.get("den")
            if _is_int(num) and _is_int(den) and num >= 0 and den > 0:
                return (int(num), int(den))
        elif _is_int(raw) and raw >= 0:
            return (int(raw), 1)
        return None
    if spec.kind == "bool":
        return raw if isinstance(raw, bool) else None
    if not isinstance(raw, str) or not raw:
        return None  # no text, or an empty one (no code: an absent reason is "none")
    if spec.kind == "enum" and raw not in spec.values:
        return None  # not one of the fact's values ("robot" for the origin): unknown
    return str(raw)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- compiling conditions into checks ---------------------------------------------------------
#
# Each check reads one prepared fact and answers True, False or None (unknown). Integer facts
# compare as ints with int bounds (a validated bound of an integer fact is an int); the share
# refunded compares as integer cross-products (value >= p/q  <=>  num * q >= p * den). A
# prepared int is either exact (``int``) or a :class:`LowerBound`; the exact case is tested
# first, by class, so the usual path is one comparison.


def _all_of(checks: tuple[Check, ...]) -> Check:
    def check_all(facts: PreparedFacts) -> bool | None:
        result: bool | None = True
        for check in checks:
            value = check(facts)
            if value is False:
                return False
            if value is None:
                result = None
        return result

    return check_all


def _compile_condition(fact: str, cond: Any) -> Check:
    spec = FACTS[fact]
    if isinstance(cond, Mapping):
        if spec.kind == "ratio":
            return _ratio_range_check(fact, cond)
        return _int_range_check(fact, cond)
    values = cond if isinstance(cond, list) else [cond]
    if spec.kind in INTEGER_KINDS or spec.kind == "ratio":
        return _number_in_check(fact, [to_fraction(v) for v in values], ratio=spec.kind == "ratio")
    allowed = frozenset(values)
    # A stored value that is no value of the fact (an empty text, an origin that is neither
    # agent nor staff) is unknown, not a mismatch: the rule takes its restrictive branch.
    known = frozenset(spec.values) if spec.kind == "enum" else None

    exact = _EXACT.get(fact)

    def check_in(facts: PreparedFacts) -> bool | None:
        value = facts.raw.get(fact)
        if value.__class__ is not exact:
            value = facts.value(fact)
            if value is None:
                return None
        if value in allowed:
            return True
        return None if value == "" or (known is not None and value not in known) else False

    return check_in


def _bound(value: Any) -> int | Fraction:
    exact = to_fraction(value)
    return exact.numerator if exact.denominator == 1 else exact


def _int_range_check(fact: str, cond: Mapping[str, Any]) -> Check:
    low_key = "gt" if "gt" in cond else "gte" if "gte" in cond else None
    high_key = "lt" if "lt" in cond else "lte" if "lte" in cond else None
    low = _bound(cond[low_key]) if low_key else 0
    high = _bound(cond[high_key]) if high_key else 0
    if high_key is None:
        # The usual rule: one lower bound. A lower bound that reaches it proves it; one that
        # does not says nothing (unknown).
        if low_key == "gt":

            def check_gt(facts: PreparedFacts) -> bool | None:
                value = facts.raw.get(fact)
                if value.__class__ is int and value >= 0:
                    return value > low
                value = facts.value(fact)
                return None if value is None or value <= low else True

            return check_gt

        def check_gte(facts: PreparedFacts) -> bool | None:
            value = facts.raw.get(fact)
            if value.__class__ is int and value >= 0:
                return value >= low
            value = facts.value(fact)
            return None if value is None or value < low else True

        return check_gte
    if low_key is None:
        # One upper bound: a lower bound already above it disproves it, else unknown.
        if high_key == "lt":

            def check_lt(facts: PreparedFacts) -> bool | None:
                value = facts.raw.get(fact)
                if value.__class__ is int and value >= 0:
                    return value < high
                value = facts.value(fact)
                return None if value is None or value < high else False

            return check_lt

        def check_lte(facts: PreparedFacts) -> bool | None:
            value = facts.raw.get(fact)
            if value.__class__ is int and value >= 0:
                return value <= high
            value = facts.value(fact)
            return None if value is None or value <= high else False

        return check_lte
    low_strict = low_key == "gt"
    high_strict = high_key == "lt"

    def check_between(facts: PreparedFacts) -> bool | None:
        value = facts.value(fact)
        if value is None:
            return None
        if value >= high if high_strict else value > high:
            # Even a lower bound above the upper bound settles it: the real value is larger.
            return False
        exact = value.__class__ is int
        if not (value > low if low_strict else value >= low):
            # A lower bound that does not reach the bound says nothing: unknown.
            return False if exact else None
        # Within both; a lower bound under the ceiling may still be above it in truth.
        return True if exact else None

    return check_between


def _ratio_range_check(fact: str, cond: Mapping[str, Any]) -> Check:
    low_key = "gt" if "gt" in cond else "gte" if "gte" in cond else None
    high_key = "lt" if "lt" in cond else "lte" if "lte" in cond else None
    low = to_fraction(cond[low_key]) if low_key else Fraction(0)
    high = to_fraction(cond[high_key]) if high_key else Fraction(0)
    lp, lq = low.numerator, low.denominator
    hp, hq = high.numerator, high.denominator
    low_strict = low_key == "gt"
    high_strict = high_key == "lt"
    has_low = low_key is not None
    has_high = high_key is not None

    def check_ratio(facts: PreparedFacts) -> bool | None:
        value: tuple[int, int] | None = facts.value(fact)
        if value is None:
            return None
        num, den = value
        if has_high:
            a, b = num * hq, hp * den
            if a >= b if high_strict else a > b:
                return False
        if has_low:
            a, b = num * lq, lp * den
            if not (a > b if low_strict else a >= b):
                return False
        return True

    return check_ratio


def _number_in_check(fact: str, values: list[Fraction], *, ratio: bool) -> Check:
    if ratio:
        allowed_ratios = frozenset(values)

        def check_ratio_in(facts: PreparedFacts) -> bool | None:
            value: tuple[int, int] | None = facts.value(fact)
            if value is None:
                return None
            num, den = value
            return (num if den == 1 else Fraction(num, den)) in allowed_ratios

        return check_ratio_in
    allowed = frozenset(values)  # Fraction(n) == n and hashes alike: ints find them
    largest = max(values)

    def check_number_in(facts: PreparedFacts) -> bool | None:
        value = facts.raw.get(fact)
        if value.__class__ is int and value >= 0:
            return value in allowed
        value = facts.value(fact)
        if value.__class__ is int:
            return value in allowed
        if value is None:
            return None
        # A lower bound: above every listed value it matches none; otherwise unknown.
        return False if value > largest else None

    return check_number_in


BASELINE_POLICY = compile_policy([])
