"""Rule validation: every rule set is checked here before it is stored or simulated. Pure.

A rule::

    {"id": "large-refunds",
     "when": {"refundAmountUsd": {"gt": 5000}, "refundOrigin": "agent"},
     "then": {"action": "require_approval"},
     "mode": "enforced"}

``when`` holds one or more conditions, all of which must hold (AND). A condition on a fact is
a range ``{"gte"|"gt": low, "lte"|"lt": high}`` (numbers only; at least one bound), a single
value (equality) or a list of values (any of them). ``mode`` is ``enforced`` (the default) or
``observe``. Errors say which rule and which part is wrong (``field`` is a dotted path such
as ``rules[1].when.refundFraction.gte``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

from policies.vocabulary import FACTS, INTEGER_KINDS, NUMERIC_KINDS, FactSpec
from sill.errors import SillError

ACTIONS: tuple[str, ...] = ("allow", "require_approval", "deny")
# Each action's one name on every page, message and export (Rules page, previews, a refund's
# rules that fired, its timeline, the held list, emails, Slack, Activity): "Allow", not
# "Refund automatically", since rules only restrict and an allow rule never makes a refund
# pass (policies.engine), and a credit is allowed as a refund is.
ACTION_LABELS: dict[str, str] = {
    "allow": "Allow",
    "require_approval": "Hold for approval",
    "deny": "Deny",
}
MODES: tuple[str, ...] = ("enforced", "observe")
# A rule's mode in a sentence ("is now observed only"): an observed rule only records what it
# would have done.
MODE_LABELS: dict[str, str] = {"enforced": "enforced", "observe": "observed only"}
BOUNDS: tuple[str, ...] = ("gte", "gt", "lte", "lt")
MAX_RULES = 50
RULE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")


class RuleError(SillError):
    """A rule set that cannot be stored: what is wrong, and where (``field``)."""

    code = "invalid_rule"
    status = 400


def validate_rules(raw: Any, *, field: str = "rules") -> list[dict[str, Any]]:
    """The normalised rule set, or ``RuleError`` naming the first problem."""
    if not isinstance(raw, list):
        raise RuleError("Rules must be a JSON list of rule objects.", field=field)
    if len(raw) > MAX_RULES:
        raise RuleError(
            f"A policy holds at most {MAX_RULES} rules; this one has {len(raw)}.", field=field
        )
    rules: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        rule = validate_rule(item, field=f"{field}[{index}]")
        if rule["id"] in seen:
            raise RuleError(
                f"Two rules are named {rule['id']!r}: rule ids must be unique.",
                field=f"{field}[{index}].id",
            )
        seen.add(rule["id"])
        rules.append(rule)
    return rules


def validate_rule(raw: Any, *, field: str = "rule") -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise RuleError("A rule must be an object with id, when and then.", field=field)
    extra = sorted(set(raw) - {"id", "when", "then", "mode"})
    if extra:
        raise RuleError(
            f"Unknown key {extra[0]!r} in a rule: a rule has id, when, then and mode.",
            field=f"{field}.{extra[0]}",
        )
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not RULE_ID_RE.match(rule_id):
        raise RuleError(
            "A rule id is 1 to 64 letters, digits, '-', '_' or '.', starting with a letter "
            "or digit.",
            field=f"{field}.id",
        )
    then = raw.get("then")
    if not isinstance(then, Mapping) or set(then) != {"action"}:
        raise RuleError(
            'then must be {"action": "allow" | "require_approval" | "deny"}.',
            field=f"{field}.then",
        )
    action = then["action"]
    if action not in ACTIONS:
        raise RuleError(
            f"Unknown action {action!r}: use allow, require_approval or deny.",
            field=f"{field}.then.action",
        )
    mode = raw.get("mode", "enforced")
    if mode not in MODES:
        raise RuleError(f"Unknown mode {mode!r}: use enforced or observe.", field=f"{field}.mode")
    when = raw.get("when")
    if not isinstance(when, Mapping) or not when:
        raise RuleError(
            "when must be an object with at least one condition on a fact.",
            field=f"{field}.when",
        )
    conditions = {
        fact: validate_condition(fact, cond, field=f"{field}.when.{fact}")
        for fact, cond in when.items()
    }
    return {"id": rule_id, "when": conditions, "then": {"action": action}, "mode": mode}


def validate_condition(fact: Any, cond: Any, *, field: str) -> Any:
    spec = FACTS.get(fact) if isinstance(fact, str) else None
    if spec is None:
        raise RuleError(f"Unknown fact {fact!r}. Rules can read: {', '.join(FACTS)}.", field=field)
    if isinstance(cond, Mapping):
        return _validate_range(spec, cond, field=field)
    if isinstance(cond, list):
        if not cond:
            raise RuleError(f"The list of values for {fact} is empty.", field=field)
        values = [_scalar(spec, v, field=f"{field}[{i}]") for i, v in enumerate(cond)]
        return values
    return _scalar(spec, cond, field=field)


def _validate_range(spec: FactSpec, cond: Mapping[str, Any], *, field: str) -> dict[str, Any]:
    if spec.kind not in NUMERIC_KINDS:
        raise RuleError(
            f"{spec.name} is not a number: a range (gte, gt, lte, lt) applies only to numbers. "
            "Give a value or a list of values.",
            field=field,
        )
    extra = sorted(set(cond) - set(BOUNDS))
    if extra:
        raise RuleError(
            f"Unknown bound {extra[0]!r}: a range takes gte, gt, lte and lt.",
            field=f"{field}.{extra[0]}",
        )
    if not cond:
        raise RuleError(
            f"The range on {spec.name} needs at least one bound (gte, gt, lte or lt).",
            field=field,
        )
    if "gte" in cond and "gt" in cond:
        raise RuleError("Give gte or gt, not both.", field=field)
    if "lte" in cond and "lt" in cond:
        raise RuleError("Give lte or lt, not both.", field=field)
    bounds = {k: _number(spec, cond[k], field=f"{field}.{k}") for k in BOUNDS if k in cond}
    low = next((bounds[k] for k in ("gte", "gt") if k in bounds), None)
    high = next((bounds[k] for k in ("lte", "lt") if k in bounds), None)
    if low is not None and high is not None:
        strict = "gt" in bounds or "lt" in bounds
        if to_fraction(low) > to_fraction(high) or (strict and low == high):
            raise RuleError(f"The range on {spec.name} can never match.", field=field)
    return bounds


def _scalar(spec: FactSpec, value: Any, *, field: str) -> Any:
    if spec.kind in NUMERIC_KINDS:
        return _number(spec, value, field=field)
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise RuleError(f"{spec.name} is true or false.", field=field)
        return value
    if not isinstance(value, str) or not value:
        raise RuleError(f"{spec.name} takes text values.", field=field)
    if spec.kind == "enum" and value not in spec.values:
        raise RuleError(
            f"{value!r} is not a value of {spec.name}: use {', '.join(spec.values)}.",
            field=field,
        )
    if spec.name == "currency" and not _CURRENCY_RE.match(value):
        raise RuleError("A currency is a 3-letter ISO 4217 code such as USD.", field=field)
    if len(value) > 64:
        raise RuleError(f"Values of {spec.name} are at most 64 characters.", field=field)
    return value


def _number(spec: FactSpec, value: Any, *, field: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise RuleError(f"{spec.name} compares with numbers.", field=field)
    if isinstance(value, float | Decimal) and not math.isfinite(value):
        raise RuleError(f"{spec.name} compares with finite numbers.", field=field)
    if value < 0:
        raise RuleError(f"{spec.name} is never negative.", field=field)
    if spec.kind in INTEGER_KINDS:
        if isinstance(value, float | Decimal) and value != int(value):
            unit = "minor units (cents)" if spec.kind in ("amount", "usd") else "whole numbers"
            raise RuleError(f"{spec.name} is counted in {unit}.", field=field)
        if value >= 10**15:  # value is not negative: checked above
            raise RuleError(f"{value} is too large for {spec.name}.", field=field)
        return int(value)
    # The share refunded: a number from 0 to 1, kept as written (0.5), compared exactly.
    if value > 1:
        raise RuleError(
            f"{spec.name} is a share from 0 to 1 (0.5 is half the charge).", field=field
        )
    if isinstance(value, Decimal):
        return int(value) if value == int(value) else float(value)
    return value


def to_fraction(value: int | float | Decimal) -> Fraction:
    """The exact value a rule author wrote: 0.1 is one tenth, not the nearest binary float."""
    if isinstance(value, float):
        return Fraction(repr(value))
    return Fraction(value)


def json_safe_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules with non-integer numbers written as decimal strings (``0.5`` → ``"0.5"``).

    The audit log's canonical JSON refuses floats; the stored policy keeps the numbers.
    """

    def convert(value: Any) -> Any:
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return [convert(rule) for rule in rules]
