"""The compiled evaluator agrees with the rules' semantics spelled out plainly (Fractions, no
shortcuts) on random rule sets and random snapshots, malformed values included. Pure."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.engine import compile_policy, evaluate, prepare_facts
from policies.rules import RuleError, to_fraction, validate_rules
from policies.vocabulary import FACTS, INTEGER_KINDS

SEVERITY = {"allow": 0, "require_approval": 1, "deny": 2}


def _read(name: str, raw: Any) -> tuple[Any, bool] | None:
    """(value, is a lower bound) as the vocabulary defines it, or None when unknown."""
    spec = FACTS[name]
    is_int = isinstance(raw, int) and not isinstance(raw, bool)
    if spec.kind in INTEGER_KINDS:
        if is_int:
            return (Fraction(raw), False) if raw >= 0 else None  # never negative
        if (
            spec.truncatable
            and isinstance(raw, dict)
            and raw.get("truncated") is True
            and isinstance(raw.get("value"), int)
            and not isinstance(raw.get("value"), bool)
        ):
            return Fraction(raw["value"]), True
        return None
    if spec.kind == "ratio":
        if isinstance(raw, dict):
            num, den = raw.get("num"), raw.get("den")
            ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (num, den))
            return (Fraction(num, den), False) if ints and num >= 0 and den > 0 else None
        return (Fraction(raw), False) if is_int and raw >= 0 else None
    if spec.kind == "bool":
        return (raw, False) if isinstance(raw, bool) else None
    if not isinstance(raw, str) or not raw or (spec.values and raw not in spec.values):
        return None  # no text, an empty one, or no value of an enum fact
    return raw, False


def _condition(name: str, cond: Any, snapshot: dict[str, Any]) -> bool | None:
    read = _read(name, snapshot.get(name))
    if read is None:
        return None
    value, lower = read
    if isinstance(cond, dict):
        answers = []
        for key, bound in cond.items():
            b = to_fraction(bound)
            if key in ("gte", "gt"):
                holds = value >= b if key == "gte" else value > b
                answers.append(True if holds else None if lower else False)
            else:
                holds = value <= b if key == "lte" else value < b
                # A lower bound under a ceiling may be above it in truth; one above it is not.
                answers.append(False if not holds else None if lower else True)
        if False in answers:
            return False
        return None if None in answers else True
    values = cond if isinstance(cond, list) else [cond]
    if FACTS[name].kind in INTEGER_KINDS or FACTS[name].kind == "ratio":
        listed = [to_fraction(v) for v in values]
        if lower:
            return False if value > max(listed) else None
        return value in listed
    return value in values


def reference(rules: list[dict[str, Any]], snapshot: dict[str, Any]) -> tuple[str, list[str]]:
    fired, worst = [], 0
    for rule in rules:
        answers = [_condition(n, c, snapshot) for n, c in rule["when"].items()]
        action = rule["then"]["action"]
        if False in answers or (None in answers and action == "allow"):
            continue
        fired.append(rule["id"])
        if rule["mode"] == "enforced":
            worst = max(worst, SEVERITY[action])
    return ("allow", "require_approval", "deny")[worst], fired


NUMBERS = st.integers(min_value=0, max_value=120) | st.sampled_from([0.5, 0.25, 1, 0.1])
RAW_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-2, max_value=130)
    | st.sampled_from(["agent", "staff", "mock", "stripe", "USD", "wrong_item", "none", ""])
    | st.builds(lambda v: {"value": v, "truncated": True}, st.integers(0, 130))
    | st.builds(lambda v: {"value": v, "truncated": False}, st.integers(0, 130))
    | st.builds(lambda n, d: {"num": n, "den": d}, st.integers(-1, 20), st.integers(-1, 20))
)


def _condition_strategy(name: str) -> st.SearchStrategy[Any]:
    kind = FACTS[name].kind
    if kind in INTEGER_KINDS or kind == "ratio":
        ranges = st.dictionaries(
            st.sampled_from(["gte", "gt", "lte", "lt"]), NUMBERS, min_size=1, max_size=2
        )
        return ranges | NUMBERS | st.lists(NUMBERS, min_size=1, max_size=3)
    if kind == "bool":
        return st.booleans()
    values = FACTS[name].values or ("agent", "staff", "USD", "wrong_item", "none", "mock")
    return st.sampled_from(values) | st.lists(st.sampled_from(values), min_size=1, max_size=2)


CONDITIONS = st.sampled_from(sorted(FACTS)).flatmap(
    lambda name: st.tuples(st.just(name), _condition_strategy(name))
)
RULES = st.lists(
    st.builds(
        lambda conds, action, mode: {
            "when": dict(conds),
            "then": {"action": action},
            "mode": mode,
        },
        st.lists(CONDITIONS, min_size=1, max_size=3),
        st.sampled_from(["allow", "require_approval", "deny"]),
        st.sampled_from(["enforced", "observe"]),
    ),
    min_size=0,
    max_size=5,
)
SNAPSHOTS = st.fixed_dictionaries({}, optional={name: RAW_VALUES for name in FACTS})


@settings(max_examples=150, deadline=None)
@given(RULES, st.lists(SNAPSHOTS, min_size=1, max_size=5))
def test_it_decides_as_the_plain_semantics_do(raw_rules, snapshots) -> None:
    for i, rule in enumerate(raw_rules):
        rule["id"] = f"r{i}"
    try:
        rules = validate_rules(raw_rules)
    except RuleError:
        assume(False)
    policy = compile_policy(rules)
    for snapshot in snapshots:
        facts = prepare_facts(snapshot)
        result = evaluate(policy, facts)
        assert (result.action, [f.id for f in result.fired]) == reference(rules, snapshot)
        # The same prepared facts give the same answer again (as a preview reads them twice).
        assert evaluate(policy, facts) == result
