"""Audited administration: member, agent and key changes each write a signed record naming
the actor (a username, or the operator of a management command), and the chain verifies."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from nacl.signing import SigningKey

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.admin_audit import OPERATOR
from sill.accounts.models import Agent, AgentKey, Membership
from sill.accounts.services import add_agent_key, b64url_encode
from tests.accounts.test_sessions import sign_in
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db
PUBLIC = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))


def bodies(site, kind: str) -> list[dict]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(site=site, kind=kind).order_by("seq")
    ]


def verified() -> str:
    out = io.StringIO()
    call_command("audit", "verify", stdout=out)  # raises (non-zero) on any bad record
    return out.getvalue()


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --- members ---------------------------------------------------------------------------------


def test_inviting_a_member_on_the_page_is_signed_with_its_actor(client_for, site):
    response = client_for("admin").post(
        "/settings/members/add/", {"email": "New@Roasters.example", "role": "staff"}
    )
    assert response.status_code == 303
    [body] = bodies(site, "member_change")
    invite_id = body.pop("invite_id")
    expires_at = body.pop("expires_at")
    assert isinstance(invite_id, int) and expires_at
    assert body == {"action": "invite", "member": "new@roasters.example", "role": "staff",
                    "can_refund": False, "replaces": None, "actor": "admin@roasters.example",
                    "actor_name": "admin@roasters.example"}  # fmt: skip
    assert "OK" in verified()


def test_a_role_change_records_before_and_after(client_for, members, site):
    staff = members["staff"]
    client = client_for("owner")
    assert (
        client.post(f"/settings/members/{staff.pk}/change/", {"role": "admin"}).status_code == 303
    )
    [body] = bodies(site, "member_change")
    assert body["action"] == "role_change" and body["member"] == "staff@roasters.example"
    assert body["before"] == {"role": "staff", "can_refund": True}
    assert (body["role"], body["can_refund"]) == ("admin", False)
    assert body["actor"] == "owner@roasters.example"
    # Saving the same role again changes nothing and records nothing.
    client.post(f"/settings/members/{staff.pk}/change/", {"role": "admin"})
    assert len(bodies(site, "member_change")) == 1
    verified()


def test_a_refused_change_records_nothing(client_for, members, site):
    owner = members["owner"]
    response = client_for("admin").post(f"/settings/members/{owner.pk}/remove/")
    assert response.status_code == 422
    assert bodies(site, "member_change") == []


def test_removing_a_member_records_the_role_and_the_sessions_it_ended(members, site):
    sign_in("staff@roasters.example")
    sign_in("staff@roasters.example")
    owner = sign_in("owner@roasters.example")
    assert owner.post(f"/settings/members/{members['staff'].pk}/remove/").status_code == 303
    [body] = bodies(site, "member_change")
    assert body == {"action": "remove", "member": "staff@roasters.example", "role": "staff",
                    "can_refund": True, "sessions_ended": 2,
                    "actor": "owner@roasters.example", "actor_name": "owner@roasters.example"}  # fmt: skip
    verified()


def test_the_members_command_records_the_operator_and_never_the_password(site, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no password piped in
    run("members", "add", "--site", site.pk, "--email", "ops@roasters.example", "--role", "admin",
        "--password", "a-long-secret-password-9")  # fmt: skip
    run("members", "add", "--site", site.pk, "--email", "ops@roasters.example", "--role", "staff")
    run("members", "add", "--site", site.pk, "--email", "ops@roasters.example", "--role", "staff")
    add, change = bodies(site, "member_change")  # the third run changed nothing
    assert (add["action"], add["role"], add["password_set"]) == ("add", "admin", True)
    assert (add["actor"], add["actor_name"]) == (None, OPERATOR)
    assert change["action"] == "role_change" and change["before"]["role"] == "admin"
    assert change["actor_name"] == "operator (manage.py)" and not change["password_set"]
    payloads = "".join(AuditRecord.objects.values_list("payload", flat=True))
    assert "a-long-secret-password-9" not in payloads
    assert Membership.objects.get(user__username="ops@roasters.example").role == "staff"
    verified()


def test_a_password_the_members_command_sets_is_recorded_on_every_site_of_the_account(
    site, other_site, monkeypatch
):
    # One account signs in to every site it belongs to: a password the operator set through
    # one site was recorded only there, and the other site's log never said its member's
    # password had changed (nor that their sessions there were ended).
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no password piped in
    run("members", "add", "--site", site.pk, "--email", "ops@roasters.example", "--role", "staff",
        "--password", "a-long-secret-password-9")  # fmt: skip
    run("members", "add", "--site", other_site.pk, "--email", "ops@roasters.example", "--role",
        "admin")  # fmt: skip
    run("members", "add", "--site", other_site.pk, "--email", "ops@roasters.example", "--role",
        "admin", "--password", "another-long-secret-password-8")  # fmt: skip
    [add_elsewhere, here] = bodies(other_site, "member_change")
    assert (add_elsewhere["action"], here["action"], here["password_set"]) == (
        "add", "password_set", True)  # fmt: skip
    add, also = bodies(site, "member_change")
    assert add["action"] == "add"
    assert also == {"action": "password_set", "member": "ops@roasters.example", "role": "staff",
                    "actor": None, "actor_name": OPERATOR}  # fmt: skip
    verified()


# --- agents and keys -------------------------------------------------------------------------


def _key_form(**overrides: str) -> dict[str, str]:
    return {"agent_id": "agent_new", "key_id": "k-1", "public_key": PUBLIC,
            "valid_from": "2026-01-01T09:30", "valid_until": "", **overrides}  # fmt: skip


def test_adding_a_key_for_a_new_agent_records_the_agent_and_the_key(client_for, site):
    response = client_for("owner").post("/settings/agents/keys/add/", _key_form())
    assert response.status_code == 303
    [agent] = bodies(site, "agent_change")
    assert agent == {"action": "create", "agent_id": "agent_new", "name": "agent_new",
                     "actor": "owner@roasters.example", "actor_name": "owner@roasters.example"}  # fmt: skip
    [key] = bodies(site, "key_change")
    assert (key["action"], key["key_id"], key["public_key"]) == ("add", "k-1", PUBLIC)
    assert key["actor"] == "owner@roasters.example"
    # A second key for the same agent is a key change only.
    client_for("admin").post("/settings/agents/keys/add/", _key_form(key_id="k-2"))
    assert len(bodies(site, "agent_change")) == 1
    assert [b["actor"] for b in bodies(site, "key_change")] == [
        "owner@roasters.example",
        "admin@roasters.example",
    ]
    verified()


def test_the_agents_command_records_the_operator(site):
    run("agents", "add-key", "--site", site.pk, "--agent", "agent_cli", "--key-id", "k1",
        "--new-agent", "--public-key", PUBLIC)  # fmt: skip
    [agent], [key] = bodies(site, "agent_change"), bodies(site, "key_change")
    assert (agent["actor"], agent["actor_name"]) == (None, OPERATOR)
    assert (key["actor"], key["actor_name"]) == (None, OPERATOR)
    verified()


def test_revoking_a_key_is_signed_with_its_actor(client_for, site):
    key = add_agent_key(site=site, agent_id="agent_a", key_id="k1",
                        public_key=bytes(SigningKey(bytes(32)).verify_key),
                        valid_from=timezone.now() - timedelta(days=1),
                        actor=site_owner(site),
                        second_factor=two_factor.OPERATOR)  # fmt: skip
    client = client_for("admin")
    assert client.post(f"/settings/agents/keys/{key.pk}/revoke/").status_code == 303
    assert client.post(f"/settings/agents/keys/{key.pk}/revoke/").status_code == 303
    revokes = [b for b in bodies(site, "key_change") if b["action"] == "revoke"]
    assert len(revokes) == 1 and revokes[0]["actor"] == "admin@roasters.example"
    assert AgentKey.objects.get(pk=key.pk).revoked_at is not None
    verified()


def test_deactivating_and_reactivating_an_agent_are_signed(client_for, site, agent):
    client = client_for("owner")
    assert client.post(f"/settings/agents/{agent.pk}/deactivate/").status_code == 303
    assert client.post(f"/settings/agents/{agent.pk}/deactivate/").status_code == 303  # no-op
    assert client_for("admin").post(f"/settings/agents/{agent.pk}/reactivate/").status_code == 303
    assert [(b["action"], b["agent_id"], b["actor"]) for b in bodies(site, "agent_change")] == [
        ("deactivate", "agent_test_shopper", "owner@roasters.example"),
        ("reactivate", "agent_test_shopper", "admin@roasters.example"),
    ]
    assert Agent.objects.get(pk=agent.pk).active
    verified()


def test_issuing_an_agent_token_is_signed_with_its_actor_and_never_the_token(
    client_for, site, agent
):
    """A bearer token is a credential: an auditor sees who issued which (its prefix)."""
    response = client_for("owner").post(f"/settings/agents/{agent.pk}/token/")
    token = response.content.decode().split('<code class="token" id="token">')[1].split("<")[0]
    run("agents", "token", "--site", site.pk, "--agent", agent.agent_id)
    issued = [b for b in bodies(site, "agent_change") if b["action"] == "issue_token"]
    assert [(b["agent_id"], b["actor"], b["actor_name"]) for b in issued] == [
        ("agent_test_shopper", "owner@roasters.example", "owner@roasters.example"),
        ("agent_test_shopper", None, OPERATOR),
    ]
    assert issued[0]["token_prefix"] == token[:12]
    assert token not in json.dumps(issued) and token[12:] not in json.dumps(issued)
    page = client_for("owner").get("/activity/").content.decode()
    assert f"Agent agent_test_shopper: API token {token[:12]}… issued" in page
    assert token[12:] not in page
    verified()


def test_issuing_a_member_token_is_signed_by_the_operator(site, members):
    """A member token acts as the member, money-moving staff refunds included."""
    token = run("members", "token", "--site", site.pk, "--email", "staff@roasters.example")
    [issued] = [b for b in bodies(site, "member_change") if b["action"] == "issue_token"]
    assert issued == {
        "action": "issue_token", "member": "staff@roasters.example",
        "token_prefix": token.strip()[:12], "actor": None, "actor_name": OPERATOR,
    }  # fmt: skip
    verified()


def test_another_sites_agent_is_not_found_and_nothing_is_recorded(client_for, site, agent):
    response = client_for("outsider").post(f"/settings/agents/{agent.pk}/deactivate/")
    assert response.status_code == 404
    assert bodies(site, "agent_change") == [] and Agent.objects.get(pk=agent.pk).active


# --- the Activity page -----------------------------------------------------------------------


def test_activity_says_what_changed_and_who_changed_it(client_for, members, site, agent):
    owner = client_for("owner")
    owner.post(f"/settings/members/{members['staff'].pk}/change/", {"role": "reviewer"})
    owner.post(f"/settings/agents/{agent.pk}/deactivate/")
    body = owner.get("/activity/").content.decode()
    assert "Member change" in body and "staff@roasters.example: staff → reviewer" in body
    assert "Agent change" in body and "Agent agent_test_shopper deactivated" in body
    assert body.count("<td>owner@roasters.example</td>") == 2
    filtered = owner.get("/activity/", {"kind": "agent_change"}).content.decode()
    assert "deactivated" in filtered and "staff → reviewer" not in filtered
