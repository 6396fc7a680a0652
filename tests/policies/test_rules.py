"""Rule validation: clear errors naming the rule and the part that is wrong. Pure."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from policies.rules import MAX_RULES, RuleError, json_safe_rules, validate_rules


def rule(**overrides: Any) -> dict[str, Any]:
    base = {"id": "r1", "when": {"refundAmountUsd": {"gt": 5000}}, "then": {"action": "deny"}}
    base.update(overrides)
    return base


def error_of(rules: Any) -> RuleError:
    with pytest.raises(RuleError) as info:
        validate_rules(rules)
    return info.value


@pytest.mark.parametrize(
    ("rules", "field", "message"),
    [
        ({"id": "r1"}, "rules", "must be a JSON list"),
        (["nope"], "rules[0]", "must be an object"),
        ([rule(extra=1)], "rules[0].extra", "Unknown key"),
        ([rule(id="")], "rules[0].id", "1 to 64"),
        ([rule(id="has space")], "rules[0].id", "1 to 64"),
        ([rule(), rule()], "rules[1].id", "must be unique"),
        ([rule(then={})], "rules[0].then", "then must be"),
        ([rule(then={"action": "escalate"})], "rules[0].then.action", "Unknown action"),
        ([rule(mode="shadow")], "rules[0].mode", "Unknown mode"),
        ([rule(when={})], "rules[0].when", "at least one condition"),
        ([rule(when={"refundColour": "red"})], "rules[0].when.refundColour", "Unknown fact"),
        ([rule(when={"refundAmountUsd": {}})], "rules[0].when.refundAmountUsd", "needs at least one bound"),
        ([rule(when={"refundAmountUsd": {"above": 1}})], "rules[0].when.refundAmountUsd.above", "Unknown bound"),
        ([rule(when={"refundAmountUsd": {"gt": 1, "gte": 2}})], "rules[0].when.refundAmountUsd", "not both"),
        ([rule(when={"refundAmountUsd": {"gte": 10, "lte": 5}})], "rules[0].when.refundAmountUsd", "never match"),
        ([rule(when={"refundAmountUsd": {"gt": 5, "lt": 5}})], "rules[0].when.refundAmountUsd", "never match"),
        ([rule(when={"refundAmountUsd": {"gt": "50"}})], "rules[0].when.refundAmountUsd.gt", "numbers"),
        ([rule(when={"refundAmountUsd": {"gt": True}})], "rules[0].when.refundAmountUsd.gt", "numbers"),
        ([rule(when={"refundAmountUsd": {"gt": 50.5}})], "rules[0].when.refundAmountUsd.gt", "minor units"),
        ([rule(when={"refundAmountUsd": {"gt": -1}})], "rules[0].when.refundAmountUsd.gt", "never negative"),
        ([rule(when={"refundChargeAgeDays": {"gt": 1.5}})], "rules[0].when.refundChargeAgeDays.gt", "whole numbers"),
        ([rule(when={"refundFraction": {"gte": 50}})], "rules[0].when.refundFraction.gte", "share from 0 to 1"),
        ([rule(when={"refundFraction": {"gte": float("nan")}})], "rules[0].when.refundFraction.gte", "finite"),
        ([rule(when={"refundDisputed": {"gte": 1}})], "rules[0].when.refundDisputed", "not a number"),
        ([rule(when={"refundDisputed": "yes"})], "rules[0].when.refundDisputed", "true or false"),
        ([rule(when={"refundOrigin": "robot"})], "rules[0].when.refundOrigin", "agent, staff"),
        ([rule(when={"rail": ["mock", "bank"]})], "rules[0].when.rail[1]", "not a value of rail"),
        ([rule(when={"refundReason": []})], "rules[0].when.refundReason", "empty"),
        ([rule(when={"refundReason": 3})], "rules[0].when.refundReason", "text values"),
        ([rule(when={"currency": "usd"})], "rules[0].when.currency", "3-letter"),
        ([rule(id=f"r{i}") for i in range(MAX_RULES + 1)], "rules", f"at most {MAX_RULES}"),
    ],
)  # fmt: skip
def test_it_refuses_bad_rules_with_a_clear_error(rules, field, message):
    error = error_of(rules)
    assert error.field == field
    assert message in error.message
    assert error.code == "invalid_rule"


def test_it_normalises_rules():
    rules = validate_rules(
        [
            {
                "id": "repeat-customer-review",
                "when": {"refundCustomerCount90d": {"gte": 3}, "refundFraction": {"gte": 0.5}},
                "then": {"action": "require_approval"},
            },
            {"id": "needs-reason", "when": {"refundReason": "none"}, "then": {"action": "deny"}},
        ]
    )
    assert rules[0]["mode"] == "enforced"
    assert rules[1] == {
        "id": "needs-reason",
        "when": {"refundReason": "none"},
        "then": {"action": "deny"},
        "mode": "enforced",
    }


def test_it_reads_decimals_from_a_rules_file():
    rules = validate_rules(
        [
            rule(
                when={
                    "refundFraction": {"gte": Decimal("0.25")},
                    "refundAmountUsd": Decimal("5000"),
                }
            )
        ]
    )
    assert rules[0]["when"] == {"refundFraction": {"gte": 0.25}, "refundAmountUsd": 5000}


def test_the_audit_copy_of_rules_holds_no_floats():
    rules = validate_rules([rule(when={"refundFraction": {"gte": 0.1}})])
    assert json_safe_rules(rules)[0]["when"] == {"refundFraction": {"gte": "0.1"}}
