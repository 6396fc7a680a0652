"""Concurrent policy changes: none is lost, one active version (row lock on the site).

Each thread has its own connection, so these are real concurrent transactions: PostgreSQL
proves the lock; SQLite's IMMEDIATE transactions serialise the writers anyway.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from audit.models import AuditRecord
from audit.selectors import chain_verification
from policies.catalog import TEMPLATES
from policies.models import PolicyVersion
from policies.selectors import active_policy_for
from policies.services import apply_catalog_item, set_auto_refund, set_rule_mode
from sill.accounts import two_factor
from sill.accounts.models import Membership, MemberToken, Role
from sill.accounts.services import (
    change_member_role,
    issue_member_token,
    remove_member,
    revoke_member_token,
)
from sill.errors import PermissionDenied
from sill.money import Money
from tests.threads import run_behind_a_member_change, run_concurrently

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_toggles_of_different_rules_all_stick(site, owner):
    apply_catalog_item(site=site, actor=owner, item=TEMPLATES["r07"])
    ids = ["conservative", "large-refund", "old-charge", "needs-reason", "disputed-deny"]
    for template in ids:
        apply_catalog_item(site=site, actor=owner, item=TEMPLATES[template])
    rule_ids = [f"tpl-{t}" for t in ids]
    results = run_concurrently(
        len(rule_ids),
        lambda i: set_rule_mode(
            site=site,
            actor=owner,
            rule_id=rule_ids[i],
            mode="observe",
            second_factor=two_factor.OPERATOR,
        ),
    )
    assert all(isinstance(r, str) for r in results), results
    active = active_policy_for(site)
    assert {r["id"]: r["mode"] for r in active.rules} == {
        "r07": "enforced",
        **{rule_id: "observe" for rule_id in rule_ids},
    }
    assert PolicyVersion.objects.filter(site=site, active=True).count() == 1
    numbers = sorted(PolicyVersion.objects.filter(site=site).values_list("number", flat=True))
    assert numbers == list(range(2, 2 + 1 + len(ids) + len(rule_ids)))
    assert chain_verification(site).ok


def test_concurrent_applies_of_one_template_write_it_once(site, owner):
    results = run_concurrently(
        6, lambda i: apply_catalog_item(site=site, actor=owner, item=TEMPLATES["conservative"])
    )
    statuses = sorted(getattr(r, "status", repr(r)) for r in results)
    assert statuses == ["already_applied"] * 5 + ["applied"], results
    assert [r["id"] for r in active_policy_for(site).rules] == ["tpl-conservative"]
    bodies = [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind="policy_change")
    ]
    assert len(bodies) == 1


# Before: a change of the rules checked its member only before its transaction. Taken up while
# an owner's removal or demotion of them was in flight (it holds the site's row, which every
# change of the rules locks too, and waits for the audit chain), it waited for that change and
# then went on: the chain read member_change, then the policy_change of someone who could no
# longer edit rules, and a raised auto-refund cap took effect.
@pytest.mark.postgres
@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_an_admin_removed_or_demoted_as_they_change_the_rules_changes_nothing(
    site, members, change
):
    owner, admin = members["owner"], members["admin"]
    set_auto_refund(  # its record starts the site's chain
        site=site, actor=owner.user, enabled=True, cap=Money(1000, "USD"),
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    version = active_policy_for(site).label

    def owner_does() -> None:
        membership = Membership.objects.select_related("site", "user").get(pk=admin.pk)
        if change == "removed":
            remove_member(membership=membership, actor=owner)
        else:
            change_member_role(
                membership=membership, actor=owner, role=Role.REVIEWER,
                second_factor=two_factor.OPERATOR,
            )  # fmt: skip

    changed, raised = run_behind_a_member_change(
        site_id=site.pk,
        change=owner_does,
        run=lambda: set_auto_refund(
            site=site, actor=admin.user, enabled=True, cap=Money(500_000, "USD"),
            second_factor=two_factor.OPERATOR,
        ),
    )  # fmt: skip

    assert changed is None, changed
    assert isinstance(raised, PermissionDenied), raised
    assert active_policy_for(site).label == version
    kinds = list(AuditRecord.objects.order_by("seq").values_list("kind", flat=True))
    assert kinds[-1] == "member_change" and kinds.count("policy_change") == 1, kinds


# Before: a rule added through the API with a member token was checked against the token only
# as the request was authenticated. Taken up while an owner's revocation of that token was in
# flight (it holds the site's row and waits for the audit chain), the rule was added after the
# revocation was confirmed: what the token asked for after its revocation went through.
@pytest.mark.postgres
def test_a_rule_asked_with_a_token_revoked_meanwhile_changes_nothing(site, members):
    owner, admin = members["owner"], members["admin"]
    token = issue_member_token(  # its record starts the chain
        membership=admin, actor=None, second_factor=two_factor.OPERATOR, system=True
    )
    version = active_policy_for(site).label

    changed, answer = run_behind_a_member_change(
        site_id=site.pk,
        change=lambda: revoke_member_token(
            token=MemberToken.objects.get(membership=admin), actor=owner.user
        ),
        run=lambda: Client().post(
            f"/api/v1/sites/{site.pk}/rules",
            data=json.dumps({"id": "big", "when": {"refundAmountUsd": {"gt": 5000}},
                             "then": {"action": "deny"}}),
            content_type="application/json", headers={"Authorization": f"Bearer {token}"},
        ),
    )  # fmt: skip

    assert isinstance(changed, MemberToken) and changed.revoked_at, changed
    assert answer.status_code == 401, answer.content
    assert answer.json()["error"]["code"] == "not_authenticated"
    assert active_policy_for(site).label == version
    assert not AuditRecord.objects.filter(kind="policy_change").exists()
