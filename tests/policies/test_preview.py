"""Preview and ``manage.py policies simulate``: stored snapshots replayed through a draft."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from policies.catalog import PACKS, build_rules
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
        Refund.objects.filter(pk=refund.pk).update(
            created_at=timezone.now() - timedelta(days=days_ago)
        )
        return refund

    return make


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
