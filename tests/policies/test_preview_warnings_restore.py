"""A preview that shows what it would do (the refunds it would decide differently, and their
money), warnings about rules that can never apply or change nothing, and restoring an earlier
policy version."""

from __future__ import annotations

import html

import pytest

from policies.engine import AutoRefund
from policies.models import PolicyVersion
from policies.selectors import active_policy_for
from policies.services import add_rule, set_auto_refund
from policies.warnings import policy_warnings
from sill.accounts import two_factor
from sill.money import Money
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

OFF = AutoRefund(enabled=False, cap_minor=0, currency="USD")


def rule(rule_id, when, action="require_approval", mode="enforced"):
    return {"id": rule_id, "when": when, "then": {"action": action}, "mode": mode}


def test_a_reason_rule_for_shopify_can_never_apply():
    """Seen: the warning named the fact by its code ("Shopify does not send refundReason"),
    on the Rules page and a preview; it now says it as the rule's conditions do (Reason)."""
    rules = [rule("shopify-wrong-item", {"rail": "shopify", "refundReason": ["wrong_item"]})]
    [warning] = policy_warnings(rules, OFF)
    assert warning == (
        "Rule “Shopify wrong item” (shopify-wrong-item) can never apply: Shopify does not send "
        "the reason "
        "(Sill reads “none” for every Shopify refund)."
    )
    assert policy_warnings([rule("s", {"rail": "shopify", "refundReason": "none"})], OFF) == []


def test_a_hold_under_a_deny_with_the_same_conditions_changes_nothing():
    when = {"refundFraction": {"gte": 0.5}}
    [warning] = policy_warnings([rule("deny-half", when, "deny"), rule("hold-half", when)], OFF)
    assert warning.startswith(
        "Rule “Hold half” (hold-half) never changes a decision: rule “Deny half” (deny-half)"
    )
    # An observed rule is only recorded: it makes nothing moot.
    assert policy_warnings([rule("deny-half", when, "deny", "observe"), rule("h", when)], OFF) == []


def test_an_amount_bound_with_no_currency_named_is_said():
    """refundAmount counts minor units of each refund's own currency: "more than 10000" is
    $100.00 for a USD refund, ¥10,000 (about $67) for a yen one and £100.00 (about $127) for a
    pound one. A rule that names no single currency compares them all as if they were one."""
    [warning] = policy_warnings([rule("big", {"refundAmount": {"gt": 10000}})], OFF)
    assert warning.startswith(
        "Rule “Big” (big) compares Refund amount in each refund's own currency"
    )
    assert "Refund amount in USD" in warning
    two = {"refundAmount": {"gt": 10000}, "currency": ["USD", "EUR"]}
    assert len(policy_warnings([rule("two", two)], OFF)) == 1
    for named in ("USD", ["USD"]):
        one = {"refundAmount": {"gt": 10000}, "currency": named}
        assert policy_warnings([rule("usd", one)], OFF) == []
    assert policy_warnings([rule("usd", {"refundAmountUsd": {"gt": 10000}})], OFF) == []


def test_an_auto_refund_cap_above_a_hold_threshold_is_said():
    rules = [rule("big", {"refundAmountUsd": {"gt": 5000}})]
    on = AutoRefund(enabled=True, cap_minor=10000, currency="USD")
    [warning] = policy_warnings(rules, on)
    assert "$100.00" in warning and "$50.00" in warning and "without review" in warning
    assert policy_warnings(rules, AutoRefund(enabled=True, cap_minor=2500, currency="USD")) == []


def test_the_rules_page_shows_the_warnings(client_for, site, members):
    set_auto_refund(
        site=site,
        actor=members["owner"].user,
        enabled=True,
        cap=Money(10000, "USD"),
        second_factor=two_factor.OPERATOR,
    )
    add_rule(
        site=site, actor=members["owner"].user, rule=rule("big", {"refundAmountUsd": {"gt": 5000}})
    )
    page = client_for("reviewer").get("/rules/").content.decode()
    assert "of rule “Big” (big):" in html.unescape(page)


def test_the_preview_lists_the_refunds_it_would_decide_differently(
    client, client_for, sign, make_order, agent, mock_rail, site, members
):
    make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    post(client, sign(refund_intent(ORIGINAL)))  # an approved agent refund of $89.00
    page = client_for("owner").get("/rules/templates/r07/").content.decode()
    assert 'id="preview-affected"' in page
    assert "$89.00" in page and "Held for approval" in page and "Refunded" in page


def test_an_earlier_version_is_restored_as_a_new_one(client_for, site, members):
    add_rule(
        site=site, actor=members["owner"].user, rule=rule("first", {"refundFraction": {"gte": 0.5}})
    )
    first = PolicyVersion.objects.get(site=site, active=True)
    add_rule(
        site=site,
        actor=members["owner"].user,
        rule=rule("second", {"refundChargeAgeDays": {"gte": 60}}),
    )

    answer = client_for("admin").post(f"/rules/versions/{first.number}/restore/")
    assert answer.status_code == 302
    active = active_policy_for(site)
    assert [r["id"] for r in active.rules] == ["first"]
    assert active.version is not None and active.version.summary == f"Restored {first.label}"
    assert PolicyVersion.objects.filter(site=site).count() == 3
    assert client_for("admin").post("/rules/versions/99/restore/").status_code == 404
    assert (
        client_for("reviewer").post(f"/rules/versions/{first.number}/restore/").status_code == 403
    )


# -- the merchant's refund window -----------------------------------------------------------


def test_a_refund_past_the_merchants_window_is_refused_with_words(
    client, client_for, sign, make_order, agent, mock_rail, site, members
):
    from datetime import timedelta

    from django.utils import timezone

    from refunds.models import Refund
    from sill.orders.models import Charge

    answer = client_for("owner").post("/rules/window/", {"days": "60"})
    assert answer.status_code == 302
    site.refresh_from_db()
    assert site.refund_window_days == 60
    order = make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    Charge.objects.filter(order=order).update(captured_at=timezone.now() - timedelta(days=61))
    body = post(client, sign(refund_intent(ORIGINAL))).json()
    assert (body["decision"], body["reason"]) == ("rejected", "refund_window_passed")
    assert Refund.objects.get().charge_id is not None  # found, and refused before the rail


def test_the_window_is_a_fact_rules_can_read(client, sign, make_order, agent, mock_rail, site):
    from refunds.models import Refund

    site.refund_window_days = 30
    site.save()
    make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    post(client, sign(refund_intent(ORIGINAL)))
    facts = Refund.objects.get().facts
    assert facts["refundWindowDaysLeft"] == 30 - facts["refundChargeAgeDays"]


# More digits than int() converts (4,300): a 422 like any other, never a 500.
@pytest.mark.parametrize("days", ["-1", "0", "abc", "4000", "9" * 5000, "0" * 5000 + "4000"])
def test_a_bad_window_changes_nothing(client_for, site, members, days):
    answer = client_for("owner").post("/rules/window/", {"days": days})
    assert answer.status_code == 422
    site.refresh_from_db()
    assert site.refund_window_days is None


def test_an_amount_bound_in_one_named_currency_is_said_as_money(site, members, client_for):
    """Seen: a rule bounding Refund amount for one currency ("currency": "EUR") read
    "Refund amount > 10000 (minor units)" on the Rules page, and with auto-refund on its
    warning said "hold threshold of 10000 minor units": money without its currency, though
    the rule names it. Both now say €100.00."""
    owner = members["owner"].user
    when = {"refundAmount": {"gt": 10000}, "currency": "EUR"}
    add_rule(site=site, actor=owner, rule=rule("big-eur", when))
    set_auto_refund(
        site=site, actor=owner, enabled=True, cap=Money(20000, "EUR"),
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    page = client_for("reviewer").get("/rules/").content.decode()
    row = page.split('id="rule-big-eur"', 1)[1].split("</tr>", 1)[0]
    assert "<li>Refund amount &gt; €100.00</li>" in row
    assert "minor units" not in row
    assert "above the hold threshold of €100.00 of rule “Big eur” (big-eur):" in html.unescape(page)
