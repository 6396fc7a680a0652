"""An owner removes or demotes an admin at the very moment that admin changes an agent on
Settings → Agents (PostgreSQL, threads): the agent's switch, caps and keys say who may spend
the site's money, so once the owner's change is confirmed, the admin's must not go through.

The owner's change is in flight (written, waiting for the site's audit chain behind another
append) when the admin's is taken up: the admin's check before its transaction still sees an
admin, and its transaction must check again (``access.hold_member``) and refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from nacl.signing import SigningKey

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, AgentToken, Membership, Role
from sill.accounts.services import (
    add_agent_key,
    b64url_encode,
    change_member_role,
    issue_agent_token,
    register_agent_key,
    remove_member,
    revoke_agent_key,
    revoke_agent_token,
    set_agent_active,
    set_agent_refunds,
)
from sill.errors import PermissionDenied
from tests.threads import run_behind_a_member_change

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

VALID_FROM = datetime(2026, 1, 1, tzinfo=UTC)


def _fresh(member: Membership) -> Membership:
    return Membership.objects.select_related("site", "user").get(pk=member.pk)


def _reactivates(agent: Agent, actor: Any) -> Callable[[], object]:
    Agent.objects.filter(pk=agent.pk).update(active=False)
    return lambda: set_agent_active(
        agent=Agent.objects.get(pk=agent.pk), actor=actor, active=True,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _raises_caps(agent: Agent, actor: Any) -> Callable[[], object]:
    Agent.objects.filter(pk=agent.pk).update(refund_cap_minor=1000, daily_refund_cap_minor=2000)
    return lambda: set_agent_refunds(
        agent=Agent.objects.get(pk=agent.pk), actor=actor, enabled=True, cap_minor=50_000,
        daily_cap_minor=None, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _adds_a_key(agent: Agent, actor: Any) -> Callable[[], object]:
    public_key = b64url_encode(bytes(SigningKey(bytes([7]) * 32).verify_key))
    return lambda: register_agent_key(
        site=agent.site, actor=actor, agent_id=agent.agent_id, key_id="k2",
        public_key_b64url=public_key, valid_from=VALID_FROM, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _revokes_the_key(agent: Agent, actor: Any) -> Callable[[], object]:
    return lambda: revoke_agent_key(
        key=AgentKey.objects.select_related("agent__site").get(key_id="k1"), actor=actor
    )


def _issues_a_token(agent: Agent, actor: Any) -> Callable[[], object]:
    return lambda: issue_agent_token(
        agent=Agent.objects.select_related("site").get(pk=agent.pk), actor=actor,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _revokes_a_token(agent: Agent, actor: Any) -> Callable[[], object]:
    issue_agent_token(agent=agent, actor=None, second_factor=two_factor.OPERATOR, system=True)
    return lambda: revoke_agent_token(
        token=AgentToken.objects.select_related("agent__site").get(agent=agent), actor=actor
    )


def _agent_state(agent: Agent) -> tuple[object, ...]:
    agent = Agent.objects.get(pk=agent.pk)
    keys = AgentKey.objects.filter(agent=agent).order_by("key_id")
    return (
        agent.active,
        agent.refund_enabled,
        agent.refund_cap_minor,
        agent.daily_refund_cap_minor,
        [(k.key_id, k.revoked_at) for k in keys],
        list(AgentToken.objects.filter(agent=agent).values_list("prefix", "revoked_at")),
    )


# Before: each of these checked the admin only before its transaction, and went through after
# the owner's change was confirmed: the chain read member_change, then the agent_change or
# key_change of someone who could no longer manage agents.
@pytest.mark.parametrize(
    ("action", "change"),
    [
        (_reactivates, "demoted"),
        (_raises_caps, "removed"),
        (_adds_a_key, "demoted"),
        (_revokes_the_key, "demoted"),
        (_issues_a_token, "removed"),
        (_revokes_a_token, "demoted"),
    ],
    ids=["reactivate", "raise_caps", "add_key", "revoke_key", "issue_token", "revoke_token"],
)
def test_an_admin_removed_or_demoted_as_they_change_an_agent_changes_nothing(
    site, members, agent, action, change
):
    owner, admin = _fresh(members["owner"]), members["admin"]
    add_agent_key(  # its key_change record starts the site's chain
        site=site, agent_id=agent.agent_id, key_id="k1",
        public_key=bytes(SigningKey(bytes(32)).verify_key), valid_from=VALID_FROM,
        actor=owner.user, second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    admin_does = action(agent, admin.user)
    before = _agent_state(agent)
    records = AuditRecord.objects.count()

    def owner_does() -> None:
        if change == "removed":
            remove_member(membership=_fresh(admin), actor=owner)
        else:
            change_member_role(
                membership=_fresh(admin), actor=owner, role=Role.REVIEWER,
                second_factor=two_factor.OPERATOR,
            )  # fmt: skip

    changed, done = run_behind_a_member_change(site_id=site.pk, change=owner_does, run=admin_does)

    assert changed is None, changed
    assert isinstance(done, PermissionDenied), done
    assert _agent_state(agent) == before
    added = AuditRecord.objects.order_by("seq")[records:]
    assert [r.kind for r in added] == ["member_change"]
