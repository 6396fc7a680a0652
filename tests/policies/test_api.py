"""The policy API: the catalog, and rules from a template (session auth, CSRF, roles, sites)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditRecord
from policies.models import PolicyVersion
from policies.selectors import active_policy_for

pytestmark = pytest.mark.django_db


def api_client(members, persona: str, *, csrf: bool = True) -> tuple[Client, dict[str, str]]:
    """A browser-like client: CSRF enforced, the token taken from a page like htmx does."""
    client = Client(enforce_csrf_checks=True)
    headers: dict[str, str] = {}
    if persona != "anonymous":
        client.force_login(members[persona].user)
    if csrf:
        client.get("/rules/" if persona != "anonymous" else "/login/")
        headers["X-CSRFToken"] = client.cookies["csrftoken"].value
    return client, headers


def apply(members, persona: str, site_id: str, body: Any, **kwargs: Any):
    client, headers = api_client(members, persona, **kwargs)
    return client.post(
        f"/api/v1/sites/{site_id}/rules/from-template",
        data=body if isinstance(body, str) else json.dumps(body),
        content_type="application/json",
        headers=headers,
    )


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 200), ("staff", 200), ("outsider", 200),
     ("anonymous", 403)],
)  # fmt: skip
def test_every_signed_in_member_reads_the_catalog(members, persona, expected):
    client, _ = api_client(members, persona, csrf=False)
    response = client.get("/api/v1/policy-templates")
    assert response.status_code == expected
    if expected == 200:
        data = response.json()
        templates = {t["id"]: t for t in data["templates"]}
        assert templates["conservative"]["ruleIds"] == ["tpl-conservative"]
        assert templates["conservative"]["params"][0]["default"] == "50.00"
        assert templates["r07"]["ruleIds"] == ["r07"]
        [pack] = data["packs"]
        assert pack["id"] == "support-refunds" and pack["title"] == "Support agent with refunds"
        assert pack["templateIds"] == [
            "large-refund",
            "old-charge",
            "customer-monthly",
            "disputed-deny",
        ]
    else:
        assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize(
    ("persona", "expected", "code"),
    [("owner", 201, None), ("admin", 201, None), ("reviewer", 403, "forbidden"),
     ("staff", 403, "forbidden"), ("outsider", 404, "not_found"),
     ("anonymous", 403, "not_authenticated")],
)  # fmt: skip
def test_only_owners_and_admins_of_the_site_apply(members, site, persona, expected, code):
    response = apply(members, persona, site.pk, {"packId": "support-refunds"})
    assert response.status_code == expected
    if code:
        assert response.json()["error"]["code"] == code
        assert not PolicyVersion.objects.filter(site=site).exists()
    else:
        assert len(active_policy_for(site).rules) == 4


def test_a_dry_run_also_needs_an_owner_or_admin(members, site):
    response = apply(members, "reviewer", site.pk, {"packId": "support-refunds", "dryRun": True})
    assert response.status_code == 403


def test_another_sites_id_answers_404(members, site, other_site):
    response = apply(members, "owner", other_site.pk, {"templateId": "r07"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert not PolicyVersion.objects.exists()
    assert apply(members, "owner", "no-such-site", {"templateId": "r07"}).status_code == 404


def test_it_needs_csrf(members, site):
    response = apply(members, "owner", site.pk, {"templateId": "r07"}, csrf=False)
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    assert not PolicyVersion.objects.exists()


def test_it_applies_a_pack_in_observe_mode(members, site):
    response = apply(members, "owner", site.pk, {"packId": "support-refunds", "mode": "observe"})
    data = response.json()
    assert response.status_code == 201
    assert (data["status"], data["packId"], data["mode"], data["version"]) == (
        "applied",
        "support-refunds",
        "observe",
        "v2",
    )
    assert [r["mode"] for r in data["rules"]] == ["observe"] * 4
    assert data["alreadyApplied"] == [] and data["preview"] is None
    assert AuditRecord.objects.filter(site=site, kind="policy_change").count() == 1


def test_applying_twice_answers_already_applied_with_the_rules_there(members, site):
    apply(members, "owner", site.pk, {"templateId": "conservative", "params": {"holdOverUsd": 70}})
    response = apply(members, "admin", site.pk, {"templateId": "conservative"})
    data = response.json()
    assert response.status_code == 200
    assert data["status"] == "already_applied" and data["rules"] == []
    assert data["alreadyApplied"] == [
        {
            "id": "tpl-conservative",
            "when": {"refundAmountUsd": {"gt": 7000}},
            "then": {"action": "require_approval"},
            "mode": "enforced",
        }
    ]
    assert data["message"] == "Already applied: “Conservative / manual review” (tpl-conservative)."
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_a_dry_run_returns_the_preview_and_writes_nothing(members, site):
    response = apply(
        members,
        "owner",
        site.pk,
        {"packId": "support-refunds", "dryRun": True, "params": {"oldChargeDays": 30}},
    )
    data = response.json()
    assert response.status_code == 200 and data["status"] == "preview"
    assert data["rules"][1]["when"] == {"refundChargeAgeDays": {"gt": 30}}
    assert data["preview"]["diff"]["added"] == [r["id"] for r in data["rules"]]
    assert data["preview"]["total"] == 0 and data["preview"]["warning"] is None
    assert not PolicyVersion.objects.exists() and not AuditRecord.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ("{not json", 400, "malformed", None),
        ("[]", 400, "malformed", None),
        ({}, 400, "invalid_field", "templateId"),
        ({"templateId": "r07", "packId": "support-refunds"}, 400, "invalid_field", "templateId"),
        ({"templateId": "nope"}, 400, "invalid_field", "templateId"),
        ({"packId": "nope"}, 400, "invalid_field", "packId"),
        ({"templateId": 7}, 400, "invalid_field", "templateId"),
        ({"templateId": "r07", "mode": "shadow"}, 400, "invalid_field", "mode"),
        ({"templateId": "r07", "dryRun": "maybe"}, 400, "invalid_field", "dryRun"),
        # A JSON boolean only: DRF read "false" and 0 as false (and applied), "true" as true.
        ({"templateId": "r07", "dryRun": "false"}, 400, "invalid_field", "dryRun"),
        ({"templateId": "r07", "dryRun": 0}, 400, "invalid_field", "dryRun"),
        ({"templateId": "r07", "dryRun": "true"}, 400, "invalid_field", "dryRun"),
        ({"templateId": "r07", "params": []}, 400, "invalid_field", "params"),
        ({"templateId": "r07", "params": {"x": 1}}, 400, "invalid_field", "params.x"),
        ({"templateId": "conservative", "params": {"holdOverUsd": "1.234"}}, 400,
         "invalid_field", "params.holdOverUsd"),
        ({"templateId": "old-charge", "params": {"oldChargeDays": 2.5}}, 400, "invalid_field",
         "params.oldChargeDays"),
        ({"templateId": "r07", "extra": 1}, 400, "invalid_field", "extra"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_error_and_writes_nothing(members, site, body, status, code, field):
    response = apply(members, "owner", site.pk, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["code"], error["field"]) == (code, field)
    assert error["message"]
    assert not PolicyVersion.objects.exists() and not AuditRecord.objects.exists()


def test_the_schema_describes_the_policy_endpoints(admin_client):
    schema = admin_client.get(
        "/api/schema/", headers={"Accept": "application/json"}
    ).content.decode()
    assert "/api/v1/policy-templates" in schema
    assert "/api/v1/sites/{site_id}/rules/from-template" in schema
