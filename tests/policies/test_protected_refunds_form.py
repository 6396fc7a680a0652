"""The "Protected refunds" form on Rules: one condition in a merchant's words becomes one
engine rule and one policy version; bad values are re-shown with their error; roles."""

from __future__ import annotations

import time

import pytest

from policies.models import PolicyVersion
from policies.selectors import active_policy_for

pytestmark = pytest.mark.django_db

URL = "/rules/protect/"


def rule_of(site):
    return active_policy_for(site).rules[-1]


@pytest.mark.parametrize(
    ("fact", "comparison", "value", "when"),
    [
        ("refundFraction", "gte", "50", {"refundFraction": {"gte": 0.5}}),
        ("refundFraction", "gt", "99.5 %", {"refundFraction": {"gt": 0.995}}),
        ("refundAmountUsd", "gt", "$1,250.00", {"refundAmountUsd": {"gt": 125000}}),
        ("refundChargeAgeDays", "gte", "60", {"refundChargeAgeDays": {"gte": 60}}),
        ("refundDisputed", "eq", "yes", {"refundDisputed": True}),
        (
            "refundReason",
            "in",
            "defective, not_received",
            {"refundReason": ["defective", "not_received"]},
        ),
        ("refundOrigin", "eq", "agent", {"refundOrigin": "agent"}),
    ],
)
def test_one_condition_becomes_one_rule(client_for, site, fact, comparison, value, when):
    answer = client_for("owner").post(
        URL, {"fact": fact, "comparison": comparison, "value": value, "action": "deny"}
    )
    assert answer.status_code == 302
    rule = rule_of(site)
    assert rule["when"] == when and rule["then"] == {"action": "deny"}
    assert rule["mode"] == "enforced" and rule["id"] == "custom-1"
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_the_form_offers_no_amount_in_each_refunds_own_currency(client_for, site):
    """A value typed in the site's currency cannot bound refundAmount, which counts minor
    units of each refund's own currency (10000 is $100.00 and ¥10,000): the form offers
    Refund amount in USD, which compares every currency through the rate table."""
    client = client_for("owner")
    answer = client.post(
        URL, {"fact": "refundAmount", "comparison": "gt", "value": "100", "action": "deny"}
    )
    assert answer.status_code == 422
    assert not PolicyVersion.objects.filter(site=site).exists()
    page = client.get("/rules/").content.decode()
    assert 'value="refundAmountUsd"' in page and 'value="refundAmount"' not in page


def test_a_named_observed_hold(client_for, site):
    client_for("admin").post(
        URL,
        {
            "fact": "refundCustomerRefunds30d",
            "comparison": "gte",
            "value": "3",
            "action": "require_approval",
            "name": "serial-refunders",
            "observe": "on",
        },
    )
    rule = rule_of(site)
    assert rule["id"] == "serial-refunders" and rule["mode"] == "observe"
    assert rule["then"] == {"action": "require_approval"}


@pytest.mark.parametrize(
    ("fact", "comparison", "value", "words"),
    [
        ("refundFraction", "gte", "150", "from 0 to 100"),
        ("refundFraction", "gte", "half", "a percentage"),
        ("refundChargeAgeDays", "gte", "1.5", "whole number"),
        # Written out, these are thousands of digits (or more than memory holds).
        ("refundChargeAgeDays", "gte", "1e4400", "too large"),
        ("refundCustomerRefunds30d", "gte", "1e99999999999", "too large"),
        ("refundCustomerRefunds30d", "gte", "-1e99999999999", "too large"),
        ("refundDisputed", "eq", "maybe", "yes or no"),
        ("refundReason", "gte", "defective", "not a number"),
        ("refundOrigin", "eq", "robot", "not a value of refundOrigin"),
    ],
)
def test_a_bad_value_is_shown_with_its_error_and_nothing_is_written(
    client_for, site, fact, comparison, value, words
):
    answer = client_for("owner").post(
        URL, {"fact": fact, "comparison": comparison, "value": value, "action": "deny"}
    )
    assert answer.status_code == 422
    assert words in answer.content.decode()
    assert not PolicyVersion.objects.filter(site=site).exists()


@pytest.mark.parametrize("fact", ["refundChargeAgeDays", "refundCustomerRefunds30d"])
def test_a_huge_whole_number_is_refused_at_once(client_for, site, fact):
    # Decimal("1e999999") reads instantly, but turning it into an int takes the better part
    # of a minute of CPU: the form must refuse it before that.
    started = time.monotonic()
    answer = client_for("owner").post(
        URL, {"fact": fact, "comparison": "gte", "value": "1e999999", "action": "deny"}
    )
    assert time.monotonic() - started < 5
    assert answer.status_code == 422
    assert "too large" in answer.content.decode()
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_only_owners_and_admins_add_rules(client_for, site):
    body = {"fact": "refundFraction", "comparison": "gte", "value": "50", "action": "deny"}
    assert client_for("reviewer").post(URL, body).status_code == 403
    assert client_for("staff").post(URL, body).status_code == 403
    assert client_for("anonymous").post(URL, body).status_code == 302
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_the_rules_page_offers_the_form_to_who_may_use_it(client_for, site):
    assert 'id="protect"' in client_for("owner").get("/rules/").content.decode()
    assert 'id="protect"' not in client_for("reviewer").get("/rules/").content.decode()
