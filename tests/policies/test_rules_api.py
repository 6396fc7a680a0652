"""The rules API: read the active policy, add a merchant's own rule (several conditions, the
engine's validation errors, one policy version per change), delete one; roles and sites."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from audit.models import AuditRecord
from policies.models import PolicyVersion
from sill.accounts import two_factor
from sill.accounts.services import issue_member_token

pytestmark = pytest.mark.django_db

RULE = {
    "id": "big-first-refunds",
    "when": {"refundFraction": {"gte": 0.5}, "refundCustomerRefunds30d": {"lt": 1}},
    "then": {"action": "require_approval"},
}


def url(site) -> str:
    return f"/api/v1/sites/{site.pk}/rules"


def post(client: Client, site, body) -> object:
    return client.post(url(site), data=json.dumps(body), content_type="application/json")


def test_an_owner_adds_a_rule_with_several_conditions_as_one_version(client_for, site):
    owner = client_for("owner")
    answer = post(owner, site, RULE)
    assert answer.status_code == 201, answer.content
    # Ratios come back as exact decimal strings, as the audit record keeps them.
    assert answer.json()["rule"]["when"] == {
        "refundFraction": {"gte": "0.5"},
        "refundCustomerRefunds30d": {"lt": 1},
    }
    assert answer.json()["rule"]["mode"] == "enforced"

    listed = owner.get(url(site)).json()
    assert listed["version"] == answer.json()["version"]
    assert [r["id"] for r in listed["rules"]] == ["big-first-refunds"]
    assert PolicyVersion.objects.filter(site=site).count() == 1
    record = AuditRecord.objects.filter(site=site, kind="policy_change").get()
    assert json.loads(record.payload)["body"]["change"] == "add_rule"


def test_a_rule_without_an_id_gets_one(client_for, site):
    body = {k: v for k, v in RULE.items() if k != "id"}
    first = post(client_for("admin"), site, body).json()["rule"]["id"]
    second = post(client_for("admin"), site, body).json()["rule"]["id"]
    assert (first, second) == ("custom-1", "custom-2")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**RULE, "when": {"refundFraction": {"gte": 2}}}, "rule.when.refundFraction.gte"),
        ({**RULE, "when": {"noSuchFact": 1}}, "rule.when.noSuchFact"),
        ({**RULE, "then": {"action": "refund_twice"}}, "rule.then.action"),
        ({**RULE, "when": {}}, "rule.when"),
        ({**RULE, "id": "bad id!"}, "rule.id"),
        ({**RULE, "extra": 1}, "rule.extra"),
    ],
)
def test_an_invalid_rule_is_refused_with_the_engines_error(client_for, site, body, field):
    answer = post(client_for("owner"), site, body)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_rule"
    assert answer.json()["error"]["field"] == field
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_a_duplicate_id_is_a_conflict(client_for, site):
    owner = client_for("owner")
    post(owner, site, RULE)
    answer = post(owner, site, RULE)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "rule_exists"
    assert PolicyVersion.objects.filter(site=site).count() == 1


@pytest.mark.parametrize("raw", [b"[]", b'{"id": "a", "id": "b"}', b"{", b'"rule"'])
def test_a_malformed_body_changes_nothing(client_for, site, raw):
    answer = client_for("owner").post(url(site), data=raw, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] in ("malformed", "invalid_rule")
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_delete_is_a_new_version(client_for, site):
    owner = client_for("owner")
    post(owner, site, RULE)
    answer = owner.delete(f"{url(site)}/big-first-refunds")
    assert answer.status_code == 200 and answer.json()["deleted"] == "big-first-refunds"
    assert owner.get(url(site)).json()["rules"] == []
    assert PolicyVersion.objects.filter(site=site).count() == 2
    assert owner.delete(f"{url(site)}/big-first-refunds").status_code == 404


def test_roles_and_sites(client_for, site, other_site):
    assert post(client_for("reviewer"), site, RULE).status_code == 403
    assert post(client_for("staff"), site, RULE).status_code == 403
    assert client_for("staff").get(url(site)).status_code == 200  # staff read the rules
    assert post(client_for("outsider"), site, RULE).status_code == 404
    assert client_for("outsider").get(url(site)).status_code == 404
    assert Client().get(url(site)).status_code == 401
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_a_member_token_acts_on_its_own_site_only(members, site, other_site):
    token = issue_member_token(
        membership=members["owner"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client = Client(enforce_csrf_checks=True)  # a token is not a cookie: no CSRF needed
    answer = client.post(
        url(site), data=json.dumps(RULE), content_type="application/json", **headers
    )
    assert answer.status_code == 201, answer.content
    assert client.get(url(other_site), **headers).status_code == 404
