"""Revoking an agent's bearer token (``manage.py agents token``, Issue token on Settings →
Agents): the service, ``manage.py agents revoke-token`` and Settings → Agents. Before these a
leaked token read the agent's refunds until the whole agent was switched off."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from audit.activity import summary_of
from audit.models import AuditRecord
from sill import errors
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentToken
from sill.accounts.services import issue_agent_token, revoke_agent_token, set_agent_active

pytestmark = pytest.mark.django_db
URL = "/settings/agents/"
HTMX = {"HTTP_HX_REQUEST": "true"}


def _token(agent: Agent) -> tuple[str, AgentToken]:
    text = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    return text, AgentToken.objects.get(prefix=text[:12])


def _api_status(token: str) -> int:
    """The agent API's answer to ``token``: 200 (the agent it belongs to) or 401 refused."""
    return Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {token}"}).status_code


def _bodies(site, action: str) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="agent_change").order_by("seq")
    return [b for b in (json.loads(r.payload)["body"] for r in records) if b["action"] == action]


@pytest.fixture
def their_agent(other_site) -> Agent:
    return Agent.objects.create(site=other_site, agent_id="agent_theirs", name="Theirs")


# --- the service -------------------------------------------------------------------------------


def test_it_revokes_a_token_records_it_and_the_api_refuses_it(site, members, agent):
    text, token = _token(agent)
    other_text, _ = _token(agent)
    assert _api_status(text) == 200
    revoked = revoke_agent_token(token=token, actor=members["admin"].user)
    assert revoked.revoked_at is not None
    assert _api_status(text) == 401
    assert _api_status(other_text) == 200  # only that token
    [body] = _bodies(site, "revoke_token")
    assert body == {
        "action": "revoke_token",
        "agent_id": "agent_test_shopper",
        "token_prefix": text[:12],
        "actor": "admin@roasters.example",
        "actor_name": "admin@roasters.example",
    }
    assert text not in "".join(AuditRecord.objects.values_list("payload", flat=True))
    assert summary_of("agent_change", body) == (
        f"Agent agent_test_shopper: API token {text[:12]}… revoked"
    )


def test_revoking_again_answers_the_same_and_writes_nothing(site, members, agent):
    _, token = _token(agent)
    first = revoke_agent_token(token=token, actor=members["admin"].user)
    records = AuditRecord.objects.count()
    again = revoke_agent_token(token=token, actor=members["owner"].user)
    assert again.revoked_at == first.revoked_at
    assert AuditRecord.objects.count() == records


def test_a_token_revoked_while_its_agent_is_off_stays_refused_once_it_is_back(site, members, agent):
    """The brake was switching the agent off; reactivating it brought the leaked token back."""
    leaked, token = _token(agent)
    kept, _ = _token(agent)
    owner = members["owner"].user
    set_agent_active(agent=agent, actor=owner, active=False, second_factor=two_factor.OPERATOR)
    revoke_agent_token(token=token, actor=owner)
    set_agent_active(agent=agent, actor=owner, active=True, second_factor=two_factor.OPERATOR)
    assert (_api_status(leaked), _api_status(kept)) == (401, 200)


def test_the_operator_revokes_with_system_and_no_actor(site, members, agent):
    _, token = _token(agent)
    with pytest.raises(errors.PermissionDenied):
        revoke_agent_token(token=token, actor=None)
    with pytest.raises(ValueError):
        revoke_agent_token(token=token, actor=members["owner"].user, system=True)
    assert revoke_agent_token(token=token, actor=None, system=True).revoked_at
    [body] = _bodies(site, "revoke_token")
    assert body["actor"] is None


def test_another_sites_owner_may_not_revoke_it(site, members, agent):
    text, token = _token(agent)
    with pytest.raises(errors.PermissionDenied):
        revoke_agent_token(token=token, actor=members["outsider"].user)
    token.refresh_from_db()
    assert token.revoked_at is None and _api_status(text) == 200


# --- manage.py agents revoke-token -------------------------------------------------------------


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("agents", "revoke-token", *args, stdout=out)
    return out.getvalue()


def test_the_command_revokes_every_token_of_the_agent(site, agent, their_agent):
    first, _ = _token(agent)
    second, _ = _token(agent)
    theirs, _ = _token(their_agent)
    out = _run("--site", site.id, "--agent", agent.agent_id)
    assert f"{first[:12]}… revoked" in out and f"{second[:12]}… revoked" in out
    assert (_api_status(first), _api_status(second), _api_status(theirs)) == (401, 401, 200)
    assert [b["actor"] for b in _bodies(site, "revoke_token")] == [None, None]
    again = _run("--site", site.id, "--agent", agent.agent_id)
    assert "revoked already" in again
    assert len(_bodies(site, "revoke_token")) == 2


def test_the_command_revokes_one_token_by_its_prefix(site, agent):
    leaked, _ = _token(agent)
    kept, _ = _token(agent)
    out = _run("--site", site.id, "--agent", agent.agent_id, "--prefix", leaked[:12])
    assert f"{leaked[:12]}… revoked" in out and kept[:12] not in out
    assert (_api_status(leaked), _api_status(kept)) == (401, 200)
    # As the page and the log show it, with its ellipsis.
    _run("--site", site.id, "--agent", agent.agent_id, "--prefix", kept[:12] + "…")
    assert _api_status(kept) == 401


def test_the_command_refuses_what_it_cannot_find(site, other_site, agent, their_agent):
    _token(agent)
    _, theirs = _token(their_agent)
    bare = Agent.objects.create(site=site, agent_id="agent_bare", name="No tokens")
    for args in (
        ("--site", "nope", "--agent", agent.agent_id),
        ("--site", site.id, "--agent", "agent_nope"),
        ("--site", site.id, "--agent", their_agent.agent_id),  # another site's agent
        # Another agent's token (here another site's) is not this agent's.
        ("--site", site.id, "--agent", agent.agent_id, "--prefix", theirs.prefix),
        ("--site", site.id, "--agent", bare.agent_id),  # no token at all
    ):
        with pytest.raises(CommandError):
            _run(*args)
    assert not AgentToken.objects.filter(revoked_at__isnull=False).exists()
    assert _bodies(site, "revoke_token") == [] and _bodies(other_site, "revoke_token") == []


# --- Settings → Agents -------------------------------------------------------------------------


def _revoke_url(token: AgentToken) -> str:
    return f"{URL}tokens/{token.pk}/revoke/"


def test_the_agents_page_lists_the_tokens_and_revokes_one(client_for, site, members, agent):
    leaked, token = _token(agent)
    old, old_token = _token(agent)
    revoke_agent_token(token=old_token, actor=None, system=True)
    owner = client_for("owner")
    page = owner.get(URL).content.decode()
    card = page[page.index(f'id="agent-{agent.pk}"') :]
    card = card[: card.index("</article>")]
    assert f"{leaked[:12]}…" in card and f"{old[:12]}…" in card
    assert f'action="{_revoke_url(token)}"' in card and _revoke_url(old_token) not in card
    assert "data-confirm=" in card and "1 active token" in card and leaked not in page

    response = owner.post(_revoke_url(token))
    assert response.status_code == 303 and response["Location"] == URL
    assert _api_status(leaked) == 401
    page = owner.get(URL).content.decode()
    assert f"API token {leaked[:12]}… of {agent.agent_id} was revoked" in page
    assert "0 active tokens" in page and _revoke_url(token) not in page
    again = owner.post(_revoke_url(token), **HTMX)
    assert again.status_code == 200 and again["HX-Redirect"] == URL
    assert "was already revoked" in owner.get(URL).content.decode()
    assert len(_bodies(site, "revoke_token")) == 2  # the operator's, then the owner's


def test_a_deactivated_agents_tokens_can_be_revoked_on_the_page(client_for, members, agent):
    leaked, token = _token(agent)
    owner = members["owner"].user
    set_agent_active(agent=agent, actor=owner, active=False, second_factor=two_factor.OPERATOR)
    client = client_for("admin")
    assert _revoke_url(token) in client.get(URL).content.decode()
    assert client.post(_revoke_url(token)).status_code == 303
    set_agent_active(agent=agent, actor=owner, active=True, second_factor=two_factor.OPERATOR)
    assert _api_status(leaked) == 401


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("reviewer", 403), ("staff", 403), ("anonymous", 302), ("outsider", 404)],
)
def test_revoking_on_the_page_is_for_this_sites_owners_and_admins(
    client_for, agent, persona, expected
):
    text, token = _token(agent)
    response = client_for(persona).post(_revoke_url(token))
    assert response.status_code == expected
    token.refresh_from_db()
    assert token.revoked_at is None and _api_status(text) == 200


def test_another_sites_token_is_not_found(client_for, their_agent):
    text, token = _token(their_agent)
    assert client_for("owner").post(_revoke_url(token)).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None and _api_status(text) == 200


def test_revoking_on_the_page_needs_a_post_with_csrf(client_for, members, agent):
    _, token = _token(agent)
    assert client_for("owner").get(_revoke_url(token)).status_code == 405
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.post(_revoke_url(token)).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_issue_page_names_the_prefix_the_token_is_listed_by(client_for, agent):
    """So whoever copied it can tell it apart on Settings → Agents, and revoke it there."""
    body = client_for("owner").post(f"{URL}{agent.pk}/token/").content.decode()
    token = AgentToken.objects.get(agent=agent)
    assert f"<code>{token.prefix}…</code>" in body and "revoke it there" in body


def test_a_deactivated_agents_header_counts_its_tokens_as_its_list_shows_them(
    client_for, members, agent
):
    """Seen: a deactivated agent's header said "2 active tokens" while the list under it
    showed both "Refused while deactivated" (the API refuses them, sill.bearer). The header
    now agrees with the list: no active token, and how many wait refused."""
    _token(agent)
    _token(agent)
    owner = members["owner"].user
    client = client_for("owner")

    def header() -> str:
        page = client.get(URL).content.decode()
        card = page.split(f'id="agent-{agent.pk}"', 1)[1].split("</header>", 1)[0]
        return " ".join(card.split("agent-actions", 1)[1].split("<form", 1)[0].split())

    assert ">2 active tokens</span>" in header()
    set_agent_active(agent=agent, actor=owner, active=False, second_factor=two_factor.OPERATOR)
    said = header()
    assert "active tokens" not in said.replace("No active tokens", "")
    assert ">No active tokens · 2 refused while deactivated</span>" in said
