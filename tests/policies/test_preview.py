"""Preview and ``manage.py policies simulate``: stored snapshots replayed through a draft."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from policies.catalog import PACKS, TEMPLATES, build_rules
from policies.selectors import preview_for
from refunds.models import Refund
from tests.policies.test_engine import BASE

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(site):
    """``stored(facts, days_ago=…)``: a refund request with that fact snapshot."""

    def make(facts: dict[str, Any] | None, *, days_ago: int = 1, amount: int | None = None):
        snapshot = None if facts is None else {**BASE, **facts}
        minor = amount if amount is not None else (snapshot or BASE)["refundAmount"]
        refund = Refund.objects.create(
            site=site, origin="agent", amount_minor=minor,
            currency=(snapshot or BASE)["currency"], decision="approved",
            status="succeeded" if minor else "rejected", facts=snapshot,
        )  # fmt: skip
        return backdated(refund, days_ago)

    return make


def backdated(refund: Refund, days_ago: int) -> Refund:
    """``refund`` as if it had been created ``days_ago`` days ago (the preview's window)."""
    Refund.objects.filter(pk=refund.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return refund


def support_refunds() -> list[dict[str, Any]]:
    return build_rules(PACKS["support-refunds"], params=None, mode="enforced")


def test_it_counts_per_rule_what_the_draft_would_have_done(site, stored):
    stored({"refundAmountUsd": 30000, "refundAmount": 30000})  # large: held
    stored({"refundChargeAgeDays": 90, "refundAmount": 1000})  # old charge: held
    stored({"refundDisputed": True, "refundAmount": 2000})  # disputed: denied
    stored({"refundCustomerRefunds30d": 1, "refundAmount": 500})  # second this month: denied
    stored({"refundCustomerRefunds30d": None, "refundAmount": 700})  # guest: unknown → denied
    stored({"refundAmount": 100, "currency": "EUR", "refundAmountUsd": 108})  # passes
    stored({"refundAmountUsd": 99999}, days_ago=31)  # outside the window
    preview = preview_for(site=site, rules=support_refunds())
    assert (preview.total, preview.evaluated, preview.without_snapshot) == (6, 6, 0)
    assert preview.warning is None
    impacts = {r.id: r for r in preview.rules}
    assert (impacts["tpl-large-refund"].would_hold, impacts["tpl-large-refund"].amounts) == (
        1,
        {"USD": 30000},
    )
    assert impacts["tpl-old-charge"].would_hold == 1
    assert (impacts["tpl-disputed-deny"].would_deny, impacts["tpl-disputed-deny"].amounts) == (
        1,
        {"USD": 2000},
    )
    assert impacts["tpl-customer-monthly"].would_deny == 2
    assert impacts["tpl-customer-monthly"].amounts == {"USD": 1200}
    assert preview.draft == {"allow": 1, "auto_refund": 0, "require_approval": 2, "deny": 3}
    assert preview.active == {"allow": 6, "auto_refund": 0, "require_approval": 0, "deny": 0}
    assert preview.changed == 5 and len(preview.changes) == 5
    assert preview.added == [r["id"] for r in support_refunds()]


def test_requests_without_a_snapshot_are_counted_apart_with_a_warning(site, stored):
    stored({"refundAmountUsd": 30000})
    stored(None, amount=4500)  # decided before the engine: an amount, no snapshot
    stored({"refundAmount": 100, "factsVersion": None})  # the old partial facts
    stored(None, amount=0)  # refused before the policy step: not a policy matter
    preview = preview_for(site=site, rules=support_refunds())
    assert (preview.total, preview.evaluated, preview.without_snapshot) == (3, 1, 2)
    assert "2 refund request(s)" in preview.warning
    assert preview.as_dict()["warning"] == preview.warning


def test_the_diff_is_against_the_active_version(site, stored, apply_template, auto_refund):
    apply_template("r07")
    auto_refund("25.00")
    stored({"refundAmount": 2000})  # held by r07, then auto-refunded
    stored({"refundAmount": 6000, "refundAmountUsd": 6000})  # held by r07
    stored({"refundAmount": 2000, "agentPlacedOriginal": False})  # held by r07
    draft = build_rules(PACKS["support-refunds"], params=None, mode="observe")
    preview = preview_for(site=site, rules=draft)
    assert preview.active == {"allow": 0, "auto_refund": 1, "require_approval": 2, "deny": 0}
    # The draft drops r07 and only observes: all allowed.
    assert preview.draft == {"allow": 3, "auto_refund": 0, "require_approval": 0, "deny": 0}
    assert preview.removed == ["r07"] and preview.changed == 3


def test_a_preview_stays_on_its_site(site, other_site, stored):
    stored({"refundDisputed": True})
    assert preview_for(site=other_site, rules=support_refunds()).total == 0


def write_rules(tmp_path, rules: Any) -> str:
    path = tmp_path / "rules.json"
    path.write_text(rules if isinstance(rules, str) else json.dumps(rules))
    return str(path)


SEED_RULES = [
    {
        "id": "repeat-customer-review",
        "when": {"refundCustomerCount90d": {"gte": 3}, "refundFraction": {"gte": 0.5}},
        "then": {"action": "require_approval"},
    },
    {
        "id": "refund-needs-reason",
        "when": {"refundReason": "none"},
        "then": {"action": "require_approval"},
    },
]


def test_the_simulate_command_replays_a_rules_file(site, stored, tmp_path, capsys):
    stored({"refundCustomerCount90d": {"value": 100, "truncated": True}, "refundAmount": 8900,
            "refundFraction": {"num": 1, "den": 1}})  # fmt: skip
    stored({"refundReason": "none", "refundAmount": 1500})
    stored({"refundAmount": 100})
    stored(None, amount=300)
    call_command(
        "policies", "simulate", "--site", site.pk, "--rules", write_rules(tmp_path, SEED_RULES)
    )
    out = capsys.readouterr().out
    assert "4 refund requests: 3 replayed, 1 without a fact snapshot" in out
    assert "Warning:" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["repeat-customer-review"][1:4] == ["enforced", "0", "1"]
    assert "$89.00" in lines["repeat-customer-review"][-1]
    assert lines["refund-needs-reason"][1:4] == ["enforced", "0", "1"]
    assert lines["held"][1:] == ["2", "0"]


def test_the_simulate_command_prints_json(site, stored, tmp_path, capsys):
    stored({"refundReason": "none"})
    path = write_rules(tmp_path, {"rules": SEED_RULES})
    call_command("policies", "simulate", "--site", site.pk, "--rules", path, "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["outcomes"]["draft"]["require_approval"] == 1
    assert data["rules"][1]["wouldHold"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[{", "is not valid JSON"),
        ([{"id": "x", "when": {"nope": 1}, "then": {"action": "deny"}}], "Unknown fact 'nope'"),
        ({"id": "x"}, "must be a JSON list"),
    ],
)
def test_the_simulate_command_explains_a_bad_file(site, tmp_path, content, message):
    with pytest.raises(CommandError, match=message):
        call_command(
            "policies", "simulate", "--site", site.pk, "--rules", write_rules(tmp_path, content)
        )


def test_the_simulate_command_needs_a_real_site_and_file(site, tmp_path):
    with pytest.raises(CommandError, match="No site"):
        call_command("policies", "simulate", "--site", "nope", "--rules", write_rules(tmp_path, []))
    with pytest.raises(CommandError, match="Cannot read"):
        call_command(
            "policies", "simulate", "--site", site.pk, "--rules", str(tmp_path / "missing")
        )


@pytest.fixture
def credited(site):
    """``credited(age_days, days_ago=…)``: a customer credit decided with that customer age."""
    from policies.vocabulary import FACTS_VERSION
    from sill.orders.models import Customer

    def make(age_days: int | None, *, amount: int = 2500, days_ago: int = 1) -> Refund:
        n = Customer.objects.filter(site=site).count()
        customer = Customer.objects.create(
            site=site, email=f"credited{n}@example.com", rail_customer_id=f"cus_preview{n}"
        )
        facts = {
            "factsVersion": FACTS_VERSION, "refundAmount": amount, "refundAmountUsd": amount,
            "creditCustomerAgeDays": age_days, "refundAgentTotalTodayUsd": amount,
            "refundReason": "goodwill", "refundOrigin": "agent", "rail": "stripe",
            "currency": "USD",
        }  # fmt: skip
        credit = Refund.objects.create(
            site=site, kind="customer_credit", customer=customer, origin="agent",
            amount_minor=amount, currency="USD", rail="stripe", decision="approved",
            status="succeeded", facts=facts,
        )  # fmt: skip
        return backdated(credit, days_ago)

    return make


def credit_new_customer() -> list[dict[str, Any]]:
    return build_rules(TEMPLATES["credit-new-customer"], params=None, mode="enforced")


def test_a_rule_about_credits_is_previewed_on_the_sites_credits(site, stored, credited):
    """Seen before: the preview replayed refunds only, so a credit template's preview showed
    no credit and not even its own rule: "nothing changes" about a rule that holds credits."""
    stored({"refundAmount": 1000})  # a refund: no rule about credits applies to it
    new = credited(3)  # a customer 3 days old: held under the draft
    credited(400)  # an old customer: allowed either way
    unknown = credited(None, amount=1000)  # an age the rail could not say: held
    credited(5, days_ago=31)  # outside the window
    rules = credit_new_customer()
    preview = preview_for(site=site, rules=rules)
    assert (preview.evaluated, preview.changed) == (1, 0)
    assert [r.id for r in preview.rules] == []  # not a refund rule
    credits = preview.credits
    assert credits is not None and credits.noun == "credit"
    assert (credits.total, credits.evaluated, credits.without_snapshot) == (3, 3, 0)
    assert credits.draft == {"allow": 1, "auto_refund": 0, "require_approval": 2, "deny": 0}
    assert credits.active == {"allow": 3, "auto_refund": 0, "require_approval": 0, "deny": 0}
    assert credits.changed == 2 and credits.changed_amounts == {"USD": 3500}
    assert {c.refund_id for c in credits.changes} == {new.pk, unknown.pk}
    [impact] = credits.rules
    assert (impact.id, impact.would_hold, impact.amounts) == (rules[0]["id"], 2, {"USD": 3500})
    assert credits.added == [rules[0]["id"]]
    shown = preview.as_dict()["credits"]
    assert (shown["changed"], shown["outcomes"]["draft"]["require_approval"]) == (2, 2)


def test_a_refund_rule_whose_facts_a_credit_has_is_previewed_on_credits_too(site, credited):
    credited(3, amount=30000)  # a large credit: the large-refund rule holds credits too
    preview = preview_for(site=site, rules=support_refunds())
    assert preview.credits is not None
    assert preview.credits.draft["require_approval"] == 1
    assert [r.id for r in preview.credits.rules if r.fired] == ["tpl-large-refund"]


def test_without_a_rule_about_credits_there_is_no_credit_preview(site, credited):
    credited(3)
    rules = build_rules(TEMPLATES["disputed-deny"], params=None, mode="enforced")
    preview = preview_for(site=site, rules=rules)  # a dispute is no credit's fact
    assert preview.credits is None and preview.as_dict()["credits"] is None


def test_the_simulate_command_replays_the_credits_apart(site, stored, credited, tmp_path, capsys):
    stored({"refundAmount": 100})
    credited(3)
    rules = write_rules(tmp_path, credit_new_customer())
    call_command("policies", "simulate", "--site", site.pk, "--rules", rules)
    out = capsys.readouterr().out
    assert "1 refund requests: 1 replayed" in out
    assert "credit:1 credit requests: 1 replayed, 0 without a fact snapshot" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["credit:tpl-credit-new-customer"][1:4] == ["enforced", "0", "1"]
    assert "tpl-credit-new-customer" not in lines  # not a refund rule
    assert lines["credit:held"][1:] == ["1", "0"] and lines["held"][1:] == ["0", "0"]
    assert "credit:auto-refunded" not in lines
