"""The evaluator, table-driven: every fact, every operator, unknown and truncated values,
precedence and observe mode. Pure: no database."""

from __future__ import annotations

from typing import Any

import pytest

from policies.engine import (
    AutoRefund,
    apply_auto_refund,
    compile_policy,
    evaluate,
    prepare_facts,
)
from policies.rules import validate_rules
from policies.vocabulary import FACTS, RAIL_NAMES
from sill.orders.models import Rail

BASE: dict[str, Any] = {
    "factsVersion": 1,
    "refundAmount": 6000,
    "refundAmountUsd": 6000,
    "refundFraction": {"num": 6000, "den": 8900},
    "refundChargeAgeDays": 10,
    "refundWindowDaysLeft": 170,
    "refundCustomerAgeDays": 400,
    "refundCustomerCount90d": 2,
    "refundCustomerAmount90dUsd": 3000,
    "refundCustomerRefunds30d": 0,
    "refundAgentTotalTodayUsd": 6000,
    "refundDisputed": False,
    "refundReason": "wrong_item",
    "refundOrigin": "agent",
    "agentPlacedOriginal": True,
    "rail": "mock",
    "currency": "USD",
}
UNKNOWN = object()


def fires(when: dict[str, Any], action: str = "deny", **facts: Any) -> bool:
    snapshot = {**BASE, **{k: (None if v is UNKNOWN else v) for k, v in facts.items()}}
    rules = validate_rules([{"id": "r", "when": when, "then": {"action": action}}])
    result = evaluate(compile_policy(rules), prepare_facts(snapshot))
    return [f.id for f in result.fired] == ["r"]


def truncated(n: int) -> dict[str, Any]:
    return {"value": n, "truncated": True}


# (fact, condition, value, fires?) — every fact with each operator it supports.
CASES = [
    # integer money facts and ranges: gt / gte / lt / lte and both ends
    ("refundAmount", {"gt": 5000}, 5001, True),
    ("refundAmount", {"gt": 5000}, 5000, False),
    ("refundAmount", {"gte": 5000}, 5000, True),
    ("refundAmount", {"lt": 5000}, 4999, True),
    ("refundAmount", {"lt": 5000}, 5000, False),
    ("refundAmount", {"lte": 5000}, 5000, True),
    ("refundAmount", {"gte": 100, "lte": 200}, 150, True),
    ("refundAmount", {"gte": 100, "lte": 200}, 201, False),
    ("refundAmount", {"gt": 100, "lt": 200}, 100, False),
    ("refundAmount", 6000, 6000, True),
    ("refundAmount", [1, 6000], 6000, True),
    ("refundAmount", [1, 2], 6000, False),
    ("refundAmountUsd", {"gt": 5000}, 6000, True),
    ("refundAmountUsd", {"gt": 5000}, 4000, False),
    # the share refunded: exact fractions, including binary-unfriendly 0.1
    ("refundFraction", {"gte": 0.5}, {"num": 1, "den": 2}, True),
    ("refundFraction", {"gt": 0.5}, {"num": 1, "den": 2}, False),
    ("refundFraction", {"gte": 0.1}, {"num": 1, "den": 10}, True),
    ("refundFraction", {"lt": 0.1}, {"num": 1, "den": 10}, False),
    ("refundFraction", {"lte": 0.3333}, {"num": 1, "den": 3}, False),
    ("refundFraction", {"gte": 1}, {"num": 8900, "den": 8900}, True),
    ("refundFraction", 1, {"num": 8900, "den": 8900}, True),
    ("refundFraction", 0.5, {"num": 4450, "den": 8900}, True),
    ("refundChargeAgeDays", {"gt": 60}, 61, True),
    ("refundChargeAgeDays", {"gt": 60}, 60, False),
    ("refundWindowDaysLeft", {"lt": 7}, 6, True),
    ("refundWindowDaysLeft", {"lt": 7}, 170, False),
    ("refundCustomerAgeDays", {"lt": 30}, 29, True),
    ("refundCustomerAgeDays", {"lt": 30}, 400, False),
    ("creditCustomerAgeDays", {"lt": 30}, 3, True),
    ("creditCustomerAgeDays", {"lt": 30}, 400, False),
    ("refundCustomerCount90d", {"gte": 3}, 3, True),
    ("refundCustomerCount90d", {"gte": 3}, 2, False),
    ("refundCustomerAmount90dUsd", {"gt": 10000}, 10001, True),
    ("refundCustomerRefunds30d", {"gte": 1}, 1, True),
    ("refundCustomerRefunds30d", {"gte": 1}, 0, False),
    ("refundAgentTotalTodayUsd", {"gt": 50000}, 50001, True),
    ("refundAgentTotalTodayUsd", {"gt": 50000}, 50000, False),
    # booleans, text and enums: a value or any of a list
    ("refundDisputed", True, True, True),
    ("refundDisputed", True, False, False),
    ("refundDisputed", [True, False], False, True),
    ("agentPlacedOriginal", False, True, False),
    ("agentPlacedOriginal", False, False, True),
    ("refundReason", "none", "none", True),
    ("refundReason", "none", "wrong_item", False),
    ("refundReason", ["defective", "other"], "other", True),
    ("refundOrigin", "staff", "staff", True),
    ("refundOrigin", "staff", "agent", False),
    ("rail", ["stripe", "shopify"], "stripe", True),
    ("rail", ["stripe", "shopify"], "mock", False),
    ("currency", "EUR", "EUR", True),
    ("currency", "EUR", "USD", False),
]


@pytest.mark.parametrize(("fact", "cond", "value", "expected"), CASES)
def test_it_compares_every_fact_with_every_operator(fact, cond, value, expected):
    assert fires({fact: cond}, **{fact: value}) is expected


def test_the_table_covers_every_fact():
    assert {case[0] for case in CASES} == set(FACTS)
    assert set(RAIL_NAMES) == set(Rail.values)


# An unknown fact takes the rule's restrictive branch, whatever the operator.
@pytest.mark.parametrize(
    ("fact", "cond"),
    [
        ("refundAmountUsd", {"gt": 5000}),
        ("refundAmountUsd", {"lt": 5000}),
        ("refundFraction", {"gte": 0.5}),
        ("refundChargeAgeDays", {"gt": 60}),
        ("refundWindowDaysLeft", {"lt": 7}),
        ("refundCustomerAgeDays", {"lt": 30}),
        ("refundCustomerCount90d", {"gte": 3}),
        ("refundCustomerAmount90dUsd", {"gte": 1}),
        ("refundCustomerRefunds30d", {"gte": 1}),
        ("refundAgentTotalTodayUsd", {"gt": 100}),
        ("refundDisputed", True),
        ("refundDisputed", False),
        ("refundReason", "none"),
        ("currency", ["EUR"]),
    ],
)
@pytest.mark.parametrize("action", ["deny", "require_approval"])
def test_an_unknown_fact_takes_the_restrictive_branch(fact, cond, action):
    assert fires({fact: cond}, action, **{fact: UNKNOWN})


def test_an_unknown_fact_never_fires_an_allow_rule():
    assert not fires({"refundAmountUsd": {"gt": 5000}}, "allow", refundAmountUsd=UNKNOWN)
    assert fires({"refundAmountUsd": {"gt": 5000}}, "allow", refundAmountUsd=6000)


def test_a_known_false_condition_beats_an_unknown_one():
    when = {"refundOrigin": "staff", "refundAmountUsd": {"gt": 5000}}
    assert not fires(when, refundOrigin="agent", refundAmountUsd=UNKNOWN)
    assert fires(when, refundOrigin="staff", refundAmountUsd=UNKNOWN)


def test_malformed_snapshot_values_are_unknown():
    # A bool where a number belongs, a string for a bool: unknown, so restrictive.
    assert fires({"refundAmountUsd": {"lt": 1}}, refundAmountUsd=True)
    assert fires({"refundDisputed": True}, refundDisputed="yes")
    assert fires({"refundFraction": {"gte": 0.9}}, refundFraction={"num": 1, "den": 0})


# A truncated history is a lower bound on the real figure.
@pytest.mark.parametrize(
    ("cond", "read", "expected"),
    [
        ({"gte": 3}, 100, True),  # what was read already meets the bound: holds
        ({"gt": 99}, 100, True),
        ({"gte": 101}, 100, "unknown"),  # does not meet it yet: unknown
        ({"gt": 100}, 100, "unknown"),
        ({"lte": 50}, 100, False),  # already above a ceiling: the real figure is too
        ({"lt": 100}, 100, False),
        ({"lte": 200}, 100, "unknown"),  # under the ceiling so far: unknown
        ({"gte": 50, "lte": 200}, 100, "unknown"),
        ({"gte": 50, "lte": 80}, 100, False),
        (100, 100, "unknown"),  # equal so far; the real figure may be larger
        ([5, 10], 100, False),  # already larger than every listed value
        ([5, 150], 100, "unknown"),
    ],
)
def test_a_truncated_lower_bound(cond, read, expected):
    for fact in ("refundCustomerCount90d", "refundCustomerAmount90dUsd"):
        deny = fires({fact: cond}, "deny", **{fact: truncated(read)})
        allow = fires({fact: cond}, "allow", **{fact: truncated(read)})
        if expected == "unknown":
            assert (deny, allow) == (True, False)  # restrictive rules fire, allow rules don't
        else:
            assert (deny, allow) == (expected, expected)


def test_truncation_only_counts_on_the_history_facts():
    # A truncated marker on a fact that is never truncated is malformed: unknown.
    assert fires({"refundAmountUsd": {"lt": 1}}, refundAmountUsd=truncated(10))


def outcome(rules: list[dict[str, Any]], **facts: Any):
    compiled = compile_policy(validate_rules(rules))
    return evaluate(compiled, prepare_facts({**BASE, **facts}))


def rule(rule_id: str, action: str, mode: str = "enforced", when=None) -> dict[str, Any]:
    return {
        "id": rule_id,
        "when": when or {"refundOrigin": "agent"},
        "then": {"action": action},
        "mode": mode,
    }


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([], "allow"),
        (["allow"], "allow"),
        (["require_approval"], "require_approval"),
        (["deny"], "deny"),
        (["allow", "require_approval"], "require_approval"),
        (["require_approval", "allow"], "require_approval"),  # allow never lowers a hold
        (["require_approval", "deny"], "deny"),
        (["deny", "require_approval"], "deny"),
        (["deny", "allow", "require_approval"], "deny"),
    ],
)
def test_precedence_is_deny_then_hold_then_allow(actions, expected):
    result = outcome([rule(f"r{i}", a) for i, a in enumerate(actions)])
    assert result.action == expected
    assert [f.action for f in result.fired] == actions


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ([rule("o", "deny", "observe")], "allow"),
        ([rule("o", "deny", "observe"), rule("e", "require_approval")], "require_approval"),
        ([rule("o", "require_approval", "observe")], "allow"),
    ],
)
def test_observe_rules_are_reported_but_never_change_the_outcome(rules, expected):
    result = outcome(rules)
    assert result.action == expected
    assert result.fired[0].as_dict() == {
        "id": "o",
        "action": rules[0]["then"]["action"],
        "mode": "observe",
    }


def test_rules_that_do_not_match_are_not_reported():
    result = outcome([rule("staff-only", "deny", when={"refundOrigin": "staff"})])
    assert (result.action, result.fired) == ("allow", ())


AUTO = AutoRefund(enabled=True, cap_minor=2500, currency="USD")


@pytest.mark.parametrize(
    ("action", "auto", "facts", "expected"),
    [
        ("require_approval", AUTO, {"refundAmount": 2000}, ("allow", True)),
        ("require_approval", AUTO, {"refundAmount": 2500}, ("allow", True)),
        ("require_approval", AUTO, {"refundAmount": 2501}, ("require_approval", False)),
        ("require_approval", AUTO, {"agentPlacedOriginal": False}, ("require_approval", False)),
        ("require_approval", AUTO, {"refundOrigin": "staff"}, ("require_approval", False)),
        ("require_approval", AUTO, {"currency": "EUR"}, ("require_approval", False)),
        ("require_approval", AUTO, {"agentPlacedOriginal": None}, ("require_approval", False)),
        ("deny", AUTO, {"refundAmount": 100}, ("deny", False)),
        ("allow", AUTO, {"refundAmount": 100}, ("allow", False)),
        ("require_approval", AutoRefund(False, 2500, "USD"), {"refundAmount": 100},
         ("require_approval", False)),
    ],
)  # fmt: skip
def test_auto_refund_lifts_only_small_holds_from_the_placing_agent(action, auto, facts, expected):
    assert apply_auto_refund(action, auto, {**BASE, "refundAmount": 2000, **facts}) == expected
