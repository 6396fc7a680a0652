"""Policies deciding real agent refunds, end to end through the API and the audit log."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from audit.models import AuditRecord
from policies.services import set_rule_mode
from refunds.models import Refund
from sill.accounts import two_factor
from sill.accounts.models import Agent
from sill.ids import new_ulid
from sill.orders.models import Dispute
from tests.refunds.conftest import refund_intent

pytestmark = pytest.mark.django_db


def record_of(refund_id: str) -> dict:
    for record in AuditRecord.objects.order_by("seq"):
        body = json.loads(record.payload)["body"]
        if body.get("refund_id") == refund_id and record.kind != "settlement":
            return {"kind": record.kind, **body}
    raise AssertionError(f"no decision record for {refund_id}")


@pytest.fixture
def order_for(make_order, agent, mock_rail):
    """An 89.00 USD order placed by ``agent`` (or ``by``) under its own purchase mandate."""

    def make(*, by: Agent | None = None, total: str = "89.00", **kwargs):
        mandate = f"mnd_{new_ulid()}"
        make_order(total=total, placed_by_agent=by or agent, source_mandate_id=mandate, **kwargs)
        return mandate

    return make


def refund(agent_api, sign, original: str, amount: str) -> dict:
    response = agent_api(sign(refund_intent(original, max_amount=Decimal(amount))))
    assert response.status_code == 201, response.json()
    return response.json()


def test_it_runs_the_baseline_when_a_site_has_no_policy(agent_api, sign, order_for):
    body = refund(agent_api, sign, order_for(), "89.00")
    assert (body["decision"], body["rules"]) == ("approved", [])
    record = record_of(body["refund_id"])
    assert record["policy_version"] == "v1-default"
    assert record["facts"]["factsVersion"] == 1
    assert record["facts"]["refundAmountUsd"] == 8900


def test_the_conservative_template_holds_60_and_approves_40(
    agent_api, sign, order_for, apply_template
):
    apply_template("conservative")
    held = refund(agent_api, sign, order_for(), "60.00")
    assert (held["decision"], held["status"]) == ("escalated", "held")
    assert held["rules"] == [
        {"id": "tpl-conservative", "action": "require_approval", "mode": "enforced"}
    ]
    approved = refund(agent_api, sign, order_for(), "40.00")
    assert (approved["decision"], approved["rules"]) == ("approved", [])
    assert Refund.objects.get(pk=approved["refund_id"]).status == "succeeded"
    record = record_of(held["refund_id"])
    assert record["kind"] == "escalated" and record["policy_version"] == "v2"
    assert record["facts"]["refundAmountUsd"] == 6000


def test_the_conservative_template_does_not_hold_exactly_50(
    agent_api, sign, order_for, apply_template
):
    apply_template("conservative")
    assert refund(agent_api, sign, order_for(), "50.00")["decision"] == "approved"
    assert refund(agent_api, sign, order_for(), "50.01")["decision"] == "escalated"


def test_auto_refund_approves_a_small_refund_from_the_agent_that_placed_the_order(
    agent_api, sign, order_for, apply_template, auto_refund
):
    apply_template("r07")  # every agent refund is held for a human...
    auto_refund("25.00")  # ...unless it is small and from the agent that placed the order
    body = refund(agent_api, sign, order_for(), "20.00")
    assert (body["decision"], body["status"]) == ("approved", "processing")
    assert body["rules"] == [{"id": "r07", "action": "require_approval", "mode": "enforced"}]
    refunded = Refund.objects.get(pk=body["refund_id"])
    assert refunded.status == "succeeded" and refunded.decided_by is None
    record = record_of(body["refund_id"])
    assert record["kind"] == "approved"
    assert record["auto_refund"] is True and record["reviewer"] is None
    assert record["facts"]["agentPlacedOriginal"] is True


def test_auto_refund_holds_the_same_refund_from_another_agent(
    agent_api, sign, order_for, apply_template, auto_refund, site
):
    other = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other shopper", refund_enabled=True
    )
    apply_template("r07")
    auto_refund("25.00")
    body = refund(agent_api, sign, order_for(by=other), "20.00")
    assert (body["decision"], body["status"]) == ("escalated", "held")
    record = record_of(body["refund_id"])
    assert record["auto_refund"] is False
    assert record["facts"]["agentPlacedOriginal"] is False


def test_auto_refund_holds_a_refund_over_the_cap(
    agent_api, sign, order_for, apply_template, auto_refund
):
    apply_template("r07")
    auto_refund("25.00")
    assert refund(agent_api, sign, order_for(), "25.00")["decision"] == "approved"
    assert refund(agent_api, sign, order_for(), "25.01")["decision"] == "escalated"


def test_auto_refund_never_overrides_a_deny(
    agent_api, sign, order_for, apply_template, auto_refund
):
    apply_template("agent-daily-cap", params={"dailyCapUsd": "5.00"})
    auto_refund("25.00")
    body = refund(agent_api, sign, order_for(), "10.00")
    assert (body["decision"], body["reason"]) == ("rejected", "policy_denied")
    assert record_of(body["refund_id"])["auto_refund"] is False


def test_an_observe_mode_deny_leaves_the_refund_allowed_and_is_recorded(
    agent_api, sign, order_for, apply_template
):
    # A daily cap of $5.00 per agent: a $10.00 refund takes the agent over it.
    apply_template("agent-daily-cap", params={"dailyCapUsd": "5.00"}, mode="observe")
    apply_template("needs-reason", mode="observe")
    original = order_for()
    body = refund(agent_api, sign, original, "10.00")
    assert body["decision"] == "approved"
    observed = {"id": "tpl-agent-daily-cap", "action": "deny", "mode": "observe"}
    assert body["rules"] == [observed]
    record = record_of(body["refund_id"])
    assert record["kind"] == "approved" and record["rules"] == [observed]
    assert record["facts"]["refundAgentTotalTodayUsd"] == 1000
    assert Refund.objects.get(pk=body["refund_id"]).rules == [observed]


def test_a_disputed_charge_is_refused_whatever_the_rules_say(
    agent_api, sign, order_for, apply_template
):
    """An open dispute stops the refund before the rules matter (it would pay twice)."""
    apply_template("disputed-deny", mode="observe")
    original = order_for()
    from sill.orders.models import Charge

    charge = Charge.objects.get(order__source_mandate_id=original)
    Dispute.objects.create(
        charge=charge, reason="fraudulent", amount_minor=8900, currency="USD",
        status="under_review", opened_at=charge.created_at,
    )  # fmt: skip
    body = refund(agent_api, sign, original, "10.00")
    assert (body["decision"], body["reason"]) == ("rejected", "disputed")


def test_switching_the_rule_to_enforced_denies(
    agent_api, sign, order_for, apply_template, site, owner
):
    apply_template("needs-reason", mode="observe")
    apply_template("conservative", mode="observe")
    set_rule_mode(
        site=site,
        actor=owner,
        rule_id="tpl-conservative",
        mode="enforced",
        second_factor=two_factor.OPERATOR,
    )
    body = refund(agent_api, sign, order_for(), "60.00")
    assert body["decision"] == "escalated"
    assert body["rules"] == [
        {"id": "tpl-conservative", "action": "require_approval", "mode": "enforced"}
    ]


def test_a_deny_beats_a_hold(agent_api, sign, order_for, apply_template):
    apply_template("conservative")
    apply_template("customer-monthly")  # guests have no customer: unknown → deny
    body = refund(agent_api, sign, order_for(), "60.00")
    assert (body["decision"], body["reason"]) == ("rejected", "policy_denied")
    assert {r["id"] for r in body["rules"]} == {"tpl-conservative", "tpl-customer-monthly"}
    assert Refund.objects.get(pk=body["refund_id"]).status == "rejected"


def test_a_policy_of_another_site_does_not_apply(
    agent_api, sign, order_for, apply_template, other_site
):
    apply_template("r07", on_site=other_site)
    assert refund(agent_api, sign, order_for(), "60.00")["decision"] == "approved"
