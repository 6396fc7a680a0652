"""A refund's facts as words for the decider (issue 15, item 6): pure, no database."""

from __future__ import annotations

import pytest

from policies.vocabulary import FACT_NAMES
from refunds.labels import action_label, labelled_rule, rule_title
from refunds.review.facts_words import _PHRASES, SILENT, fact_phrases, humanize_key, raw_facts

SEED = {
    "factsVersion": 1,
    "refundAmount": 24900,
    "refundAmountUsd": 24900,
    "refundFraction": {"num": 24900, "den": 24900},
    "refundChargeAgeDays": 0,
    "refundCustomerAgeDays": None,
    "refundCustomerCount90d": 0,
    "refundCustomerAmount90dUsd": 0,
    "refundCustomerRefunds30d": 0,
    "refundAgentTotalTodayUsd": 24900,
    "refundDisputed": False,
    "refundReason": "not_received",
    "refundOrigin": "agent",
    "agentPlacedOriginal": True,
    "rail": "stripe",
    "currency": "USD",
}


def test_it_says_the_seeds_facts_as_phrases():
    assert fact_phrases(SEED) == [
        "100% of the order",
        "paid today",
        "first refund for this customer in 30 days",
        "the agent placed the order",
        "asked by an agent",
        "reason: Not received",
        "no dispute",
        "a guest or unknown customer",
        "no refunded charges in 90 days",
        "$249.00 refunded by this agent today, this one included",
        "paid on Stripe",
    ]


def test_no_phrase_prints_a_code_or_json():
    text = " · ".join(fact_phrases(SEED))
    for code in ("not_received", '{"num"', "require_approval", "stripe", "True", "None"):
        assert code not in text


@pytest.mark.parametrize("name", FACT_NAMES)
def test_every_fact_the_vocabulary_knows_has_words(name):
    assert name in _PHRASES or name in SILENT


@pytest.mark.parametrize(
    ("facts", "phrase"),
    [
        ({"refundFraction": {"num": 4450, "den": 8900}}, "50% of the order"),
        ({"refundFraction": {"num": 1, "den": 3}}, "33.3% of the order"),
        ({"refundFraction": None}, "share of the order unknown"),
        ({"refundChargeAgeDays": 1}, "paid yesterday"),
        ({"refundChargeAgeDays": 12}, "paid 12 days ago"),
        ({"refundWindowDaysLeft": 3}, "3 days left in the refund window"),
        ({"refundWindowDaysLeft": 0}, "the refund window closes today"),
        ({"refundCustomerAgeDays": 400}, "a customer for 400 days"),
        (
            {"refundCustomerCount90d": {"value": 100, "truncated": True}},
            "at least 100 refunded charges in 90 days",
        ),
        ({"refundCustomerAmount90dUsd": 1250}, "$12.50 refunded to them in 90 days"),
        ({"refundCustomerRefunds30d": 2}, "2 earlier refunds for this customer in 30 days"),
        ({"refundDisputed": True}, "the charge is disputed"),
        ({"refundReason": "none"}, "no reason given"),
        ({"refundOrigin": "staff"}, "asked by a staff member"),
        ({"refundAmountUsd": 1100, "currency": "EUR"}, "about $11.00 in US dollars"),
    ],
)
def test_it_words_each_fact(facts, phrase):
    assert phrase in fact_phrases(facts)


def test_an_unknown_fact_falls_back_to_a_humanized_label():
    assert fact_phrases({"refundSomethingNew": 3}) == ["refund something new: 3"]
    assert fact_phrases({"zeta": 1, "refundFraction": {"num": 1, "den": 2}}) == [
        "50% of the order",
        "zeta: 1",
    ]
    assert humanize_key("refundSomethingNew") == "Refund something new"


def test_the_raw_facts_keep_every_key_with_its_label():
    rows = {row.key: row for row in raw_facts(SEED)}
    assert set(rows) == set(SEED)
    assert rows["refundFraction"].label == "Share of the charge refunded"
    assert rows["refundFraction"].value == '{"num": 24900, "den": 24900}'


def test_rules_and_actions_have_human_labels():
    assert rule_title("tpl-customer-monthly") == "One refund per customer per 30 days"
    assert rule_title("r07") == "Human review on destructive actions (r07)"
    assert rule_title("my-own-rule") == "My own rule"
    assert action_label("require_approval") == "Hold for approval"
    assert action_label("allow") == "Allow"
    assert action_label("deny") == "Deny"
    rule = labelled_rule({"id": "r07", "action": "require_approval", "mode": "enforced"})
    assert rule["title"].startswith("Human review") and rule["action_label"] == "Hold for approval"
