"""Policy versions: every change is a new version plus its audit record, all or nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.models import AuditRecord
from audit.selectors import chain_verification
from policies import catalog
from policies.catalog import CatalogError
from policies.models import PolicyVersion
from policies.selectors import active_policy_for
from policies.services import delete_rule, set_auto_refund, set_rule_mode
from sill.accounts import two_factor
from sill.errors import NotFound, SillError
from sill.money import Money

pytestmark = pytest.mark.django_db


def policy_records(site) -> list[dict[str, Any]]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="policy_change").order_by("seq")
    ]


def test_a_site_without_versions_runs_the_baseline(site):
    active = active_policy_for(site)
    assert (active.label, active.rules, active.auto_refund.enabled) == ("v1-default", (), False)


def test_applying_a_template_writes_a_version_and_an_audit_record(site, owner, apply_template):
    result = apply_template("conservative")
    assert (result.status, result.version_label) == ("applied", "v2")
    assert [r["id"] for r in result.rules] == ["tpl-conservative"]
    version = PolicyVersion.objects.get(site=site, active=True)
    assert version.number == 2 and version.created_by == owner
    assert version.rules == [
        {
            "id": "tpl-conservative",
            "when": {"refundAmountUsd": {"gt": 5000}},
            "then": {"action": "require_approval"},
            "mode": "enforced",
        }
    ]
    [body] = policy_records(site)
    assert body["change"] == "apply_template" and body["catalog_id"] == "conservative"
    assert (body["version"], body["previous_version"]) == ("v2", "v1-default")
    assert body["actor"] == "owner@roasters.example"
    assert body["rules"] == version.rules
    assert chain_verification(site).ok


def test_applying_a_template_twice_answers_already_applied_with_the_rules_there(
    site, apply_template
):
    apply_template("conservative", mode="observe")
    again = apply_template("conservative", params={"holdOverUsd": "80.00"})
    assert again.status == "already_applied" and again.rules == []
    assert [(r["id"], r["mode"]) for r in again.already] == [("tpl-conservative", "observe")]
    assert again.already[0]["when"] == {"refundAmountUsd": {"gt": 5000}}
    assert PolicyVersion.objects.filter(site=site).count() == 1
    assert len(policy_records(site)) == 1


def test_a_pack_writes_its_rules_in_one_version(site, apply_template):
    result = apply_template("support-refunds", mode="observe")
    assert [r["id"] for r in result.rules] == [
        "tpl-large-refund",
        "tpl-old-charge",
        "tpl-customer-monthly",
        "tpl-disputed-deny",
    ]
    assert {r["mode"] for r in result.rules} == {"observe"}
    assert PolicyVersion.objects.filter(site=site).count() == 1
    assert active_policy_for(site).label == "v2"


def test_a_pack_over_a_template_it_holds_adds_only_the_others(site, apply_template):
    apply_template("disputed-deny")
    result = apply_template("support-refunds")
    assert result.status == "applied"
    assert [r["id"] for r in result.already] == ["tpl-disputed-deny"]
    assert len(result.rules) == 3
    assert len(active_policy_for(site).rules) == 4
    assert apply_template("support-refunds").status == "already_applied"


@pytest.mark.parametrize(
    ("item_id", "params", "expected_when"),
    [
        ("conservative", {"holdOverUsd": "75.50"}, {"refundAmountUsd": {"gt": 7550}}),
        ("large-refund", {"largeRefundUsd": 300}, {"refundAmountUsd": {"gt": 30000}}),
        ("old-charge", {"oldChargeDays": "90"}, {"refundChargeAgeDays": {"gt": 90}}),
        ("customer-monthly", {"refundsPerCustomer": 2}, {"refundCustomerRefunds30d": {"gte": 2}}),
        (
            "agent-daily-cap",
            {"dailyCapUsd": "1000"},
            {"refundOrigin": "agent", "refundAgentTotalTodayUsd": {"gt": 100000}},
        ),
        ("disputed-deny", {}, {"refundDisputed": True}),
        (
            "repeat-customer",
            {"repeatCount": 4, "repeatSharePercent": 25},
            {"refundCustomerCount90d": {"gte": 4}, "refundFraction": {"gte": 0.25}},
        ),
        ("needs-reason", None, {"refundReason": "none"}),
        ("r07", None, {"refundOrigin": "agent"}),
    ],
)
def test_every_template_turns_its_parameters_into_rules(item_id, params, expected_when):
    item = catalog.item_by_id(item_id)
    [rule] = catalog.build_rules(item, params=params, mode="enforced")
    assert rule["id"] == ("r07" if item_id == "r07" else f"tpl-{item_id}")
    assert rule["when"] == expected_when


@pytest.mark.parametrize(
    ("item_id", "params", "mode", "field"),
    [
        ("conservative", {"holdOverUsd": "fifty"}, "enforced", "params.holdOverUsd"),
        ("conservative", {"holdOverUsd": "50.001"}, "enforced", "params.holdOverUsd"),
        ("conservative", {"holdOverUsd": "-5"}, "enforced", "params.holdOverUsd"),
        ("conservative", {"holdOverUsd": True}, "enforced", "params.holdOverUsd"),
        ("conservative", {"colour": "red"}, "enforced", "params.colour"),
        ("old-charge", {"oldChargeDays": "1.5"}, "enforced", "params.oldChargeDays"),
        ("old-charge", {"oldChargeDays": 99999}, "enforced", "params.oldChargeDays"),
        ("repeat-customer", {"repeatSharePercent": 101}, "enforced", "params.repeatSharePercent"),
        ("support-refunds", ["nope"], "enforced", "params"),
        ("conservative", {}, "shadow", "mode"),
    ],
)
def test_bad_parameters_are_refused_and_nothing_is_written(
    site, apply_template, item_id, params, mode, field
):
    with pytest.raises(CatalogError) as info:
        apply_template(item_id, params=params, mode=mode)
    assert info.value.field == field and info.value.code == "invalid_field"
    assert not PolicyVersion.objects.filter(site=site).exists()
    assert not AuditRecord.objects.filter(site=site).exists()


def test_a_dry_run_writes_nothing(site, apply_template):
    result = apply_template("support-refunds", dry_run=True)
    assert result.status == "preview" and len(result.rules) == 4
    assert result.preview is not None and result.preview.total == 0
    assert not PolicyVersion.objects.filter(site=site).exists()
    assert not AuditRecord.objects.filter(site=site).exists()


def test_a_policy_with_no_room_writes_nothing(site, owner, apply_template):
    custom = [
        {"id": f"c{i}", "when": {"refundReason": f"x{i}"}, "then": {"action": "deny"}}
        for i in range(48)
    ]
    PolicyVersion.objects.create(site=site, number=2, rules=custom, rules_digest="x")
    with pytest.raises(SillError) as info:
        apply_template("support-refunds")
    assert info.value.code == "too_many_rules" and "delete 2 rule(s)" in info.value.message
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_switching_modes_and_deleting_write_new_versions(site, owner, apply_template):
    apply_template("support-refunds")
    assert (
        set_rule_mode(
            site=site,
            actor=owner,
            rule_id="tpl-old-charge",
            mode="observe",
            second_factor=two_factor.OPERATOR,
        )
        == "v3"
    )
    # The same mode again changes nothing: no version, no record.
    assert (
        set_rule_mode(
            site=site,
            actor=owner,
            rule_id="tpl-old-charge",
            mode="observe",
            second_factor=two_factor.OPERATOR,
        )
        == "v3"
    )
    assert (
        delete_rule(
            site=site, actor=owner, rule_id="tpl-large-refund", second_factor=two_factor.OPERATOR
        )
        == "v4"
    )
    active = active_policy_for(site)
    assert [(r["id"], r["mode"]) for r in active.rules] == [
        ("tpl-old-charge", "observe"),
        ("tpl-customer-monthly", "enforced"),
        ("tpl-disputed-deny", "enforced"),
    ]
    assert [b["change"] for b in policy_records(site)] == [
        "apply_template",
        "set_rule_mode",
        "delete_rule",
    ]
    assert PolicyVersion.objects.filter(site=site, active=True).count() == 1
    assert chain_verification(site).ok


def test_an_unknown_rule_is_not_found(site, owner, other_site, apply_template):
    apply_template("r07", on_site=other_site)
    with pytest.raises(NotFound):
        set_rule_mode(
            site=site, actor=owner, rule_id="r07", mode="observe", second_factor=two_factor.OPERATOR
        )
    with pytest.raises(NotFound):
        delete_rule(site=site, actor=owner, rule_id="r07", second_factor=two_factor.OPERATOR)
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_auto_refund_settings_are_versioned(site, owner):
    label = set_auto_refund(
        site=site,
        actor=owner,
        enabled=True,
        cap=Money(2500, "USD"),
        second_factor=two_factor.OPERATOR,
    )
    assert label == "v2"
    auto = active_policy_for(site).auto_refund
    assert (auto.enabled, auto.cap_minor, auto.currency) == (True, 2500, "USD")
    [body] = policy_records(site)
    assert body["auto_refund"] == {"enabled": True, "cap_minor": 2500, "currency": "USD"}
    with pytest.raises(SillError) as info:
        set_auto_refund(
            site=site,
            actor=owner,
            enabled=True,
            cap=Money(0, "USD"),
            second_factor=two_factor.OPERATOR,
        )
    assert info.value.field == "cap"
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_a_change_takes_effect_at_once(site, owner, apply_template):
    apply_template("r07")
    first = active_policy_for(site)
    set_rule_mode(
        site=site, actor=owner, rule_id="r07", mode="observe", second_factor=two_factor.OPERATOR
    )
    second = active_policy_for(site)
    assert first.compiled.rules[0].enforced and not second.compiled.rules[0].enforced


def test_compiled_rules_are_cached_per_rule_set(site, other_site, apply_template):
    apply_template("r07")
    apply_template("r07", on_site=other_site)
    # Same rules, same digest: one compiled policy shared by both sites and every decision.
    assert active_policy_for(site).compiled is active_policy_for(other_site).compiled
    assert active_policy_for(site).compiled is active_policy_for(site).compiled


def test_versions_are_per_site(site, other_site, apply_template):
    apply_template("r07")
    apply_template("conservative", on_site=other_site)
    apply_template("needs-reason", on_site=other_site)
    assert active_policy_for(site).label == "v2"
    assert active_policy_for(other_site).label == "v3"
    assert [r["id"] for r in active_policy_for(site).rules] == ["r07"]
