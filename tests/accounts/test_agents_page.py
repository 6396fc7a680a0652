"""Settings → Agents: keys (add, revoke, audited), agents on/off, tokens shown once."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from nacl.signing import SigningKey

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, AgentToken
from sill.accounts.services import add_agent_key, b64url_encode, issue_agent_token, token_sha256
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db
URL = "/settings/agents/"
HX = {"HTTP_HX_REQUEST": "true"}
PUBLIC = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
OTHER_PUBLIC = b64url_encode(bytes(SigningKey(bytes(range(32))).verify_key))


@pytest.fixture
def key(site):
    return add_agent_key(
        site=site,
        agent_id="agent_test_shopper",
        key_id="k1",
        public_key=bytes(SigningKey(bytes(32)).verify_key),
        valid_from=timezone.now() - timedelta(days=1),
        actor=site_owner(site),
        second_factor=two_factor.OPERATOR,
    )


@pytest.fixture
def their_key(other_site):
    return add_agent_key(
        site=other_site,
        agent_id="agent_theirs",
        key_id="k9",
        public_key=bytes(SigningKey(bytes(32)).verify_key),
        valid_from=timezone.now(),
        actor=site_owner(other_site),
        second_factor=two_factor.OPERATOR,
    )


def _form(**overrides: str) -> dict[str, str]:
    return {
        "agent_id": "agent_new",
        "key_id": "key-2026-01",
        "public_key": PUBLIC,
        "valid_from": "2026-01-01T09:30",
        "valid_until": "",
        **overrides,
    }


def _key_changes(site) -> list[str]:
    return [r.payload for r in AuditRecord.objects.filter(site=site, kind="key_change")]


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 403), ("staff", 403), ("anonymous", 302)],
)
def test_it_lets_only_owners_and_admins_open_the_page(client_for, key, persona, expected):
    response = client_for(persona).get(URL)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/")
    if expected == 200:
        body = response.content.decode()
        assert "agent_test_shopper" in body and "k1" in body
        assert f"{PUBLIC[:8]}…{PUBLIC[-6:]}" in body
        assert "0 active tokens" in body and "Valid" in body


def test_an_outsider_sees_only_their_own_agents(client_for, key, their_key):
    body = client_for("outsider").get(URL).content.decode()
    assert "agent_theirs" in body and "agent_test_shopper" not in body


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("reviewer", 403), ("staff", 403), ("anonymous", 302), ("outsider", 404)],
)
def test_every_action_is_for_owners_and_admins_of_the_site(
    client_for, site, key, persona, expected
):
    client = client_for(persona)
    agent = key.agent
    for url in (
        f"{URL}keys/{key.pk}/revoke/",
        f"{URL}{agent.pk}/deactivate/",
        f"{URL}{agent.pk}/reactivate/",
        f"{URL}{agent.pk}/token/",
    ):
        assert client.post(url).status_code == expected, url
    key.refresh_from_db()
    agent.refresh_from_db()
    assert key.revoked_at is None and agent.active
    assert not AgentToken.objects.exists()


@pytest.mark.parametrize(("persona", "expected"), [("reviewer", 403), ("staff", 403)])
def test_adding_a_key_is_for_owners_and_admins(client_for, site, persona, expected):
    assert client_for(persona).post(f"{URL}keys/add/", _form()).status_code == expected
    assert not Agent.objects.exists()


def test_another_sites_key_and_agent_are_404s(client_for, their_key):
    client = client_for("owner")
    assert client.post(f"{URL}keys/{their_key.pk}/revoke/").status_code == 404
    assert client.post(f"{URL}{their_key.agent.pk}/deactivate/").status_code == 404
    assert client.post(f"{URL}{their_key.agent.pk}/token/").status_code == 404
    their_key.refresh_from_db()
    assert their_key.revoked_at is None and their_key.agent.active
    assert not AgentToken.objects.exists()


def test_get_on_an_action_is_not_allowed(client_for, key):
    assert client_for("owner").get(f"{URL}keys/{key.pk}/revoke/").status_code == 405


def test_an_admin_adds_a_key_and_it_is_audited(client_for, site):
    client = client_for("admin")
    response = client.post(f"{URL}keys/add/", _form(valid_until="2027-01-01T00:00"))
    assert response.status_code == 303 and response["Location"] == URL
    key = AgentKey.objects.get(agent__site=site, agent__agent_id="agent_new")
    assert bytes(key.public_key) == bytes(SigningKey(bytes(32)).verify_key)
    assert key.valid_from == datetime(2026, 1, 1, 9, 30, tzinfo=UTC)
    assert key.valid_until == datetime(2027, 1, 1, tzinfo=UTC)
    [record] = _key_changes(site)
    assert '"action":"add"' in record and PUBLIC in record
    assert "Added key key-2026-01 to agent_new." in client.get(URL).content.decode()


def test_htmx_add_redirects_the_client(client_for, site):
    response = client_for("owner").post(f"{URL}keys/add/", _form(), **HX)
    assert response.status_code == 200 and response["HX-Redirect"] == URL
    assert AgentKey.objects.filter(agent__site=site).count() == 1


def test_key_times_are_read_and_labelled_in_the_sites_time_zone(client_for, site):
    site.timezone = "America/New_York"
    site.save(update_fields=["timezone"])
    client = client_for("owner")
    body = client.get(URL).content.decode()
    assert 'Valid from <span class="muted">(America/New_York time)</span>' in body
    assert "(UTC" not in body
    assert client.post(f"{URL}keys/add/", _form()).status_code == 303
    key = AgentKey.objects.get(agent__site=site, agent__agent_id="agent_new")
    assert key.valid_from == datetime(2026, 1, 1, 14, 30, tzinfo=UTC)  # 09:30 in New York


def test_the_form_defaults_valid_from_to_now(client_for):
    body = client_for("owner").get(URL).content.decode()
    assert f'value="{timezone.now():%Y-%m-%dT}' in body


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"public_key": "c2hvcnQ"}, "32 bytes in base64url"),
        ({"public_key": PUBLIC[:-1] + "!"}, "32 bytes in base64url"),
        ({"agent_id": "bad id!"}, "An agent id is"),
        ({"key_id": ""}, "Key id: This field is required."),
        ({"valid_from": "yesterday"}, "Valid from: Enter a valid date/time."),
        ({"valid_until": "2025-12-31T00:00"}, "must be after"),
        ({"key_id": "k1", "agent_id": "agent_test_shopper"}, "already has a key k1"),
        (
            {"key_id": "k1", "agent_id": "agent_test_shopper", "public_key": OTHER_PUBLIC},
            "already has a key k1",
        ),
    ],
)
def test_bad_input_is_a_422_that_writes_nothing(client_for, site, key, overrides, message):
    client = client_for("owner")
    before = (AgentKey.objects.count(), Agent.objects.count(), len(_key_changes(site)))
    for extra in ({}, HX):
        response = client.post(f"{URL}keys/add/", _form(**overrides), **extra)
        assert response.status_code == 422
        body = response.content.decode().replace("&#x27;", "'")
        assert message in body and 'aria-invalid="true"' in body
        # Full page without htmx, only the form with it; typed values are kept.
        assert ("<html" in body) is (not extra)
        assert 'id="add-key"' in body
    assert (AgentKey.objects.count(), Agent.objects.count(), len(_key_changes(site))) == before


def test_a_revoked_key_id_cannot_be_added_again(client_for, site, key):
    client = client_for("owner")
    client.post(f"{URL}keys/{key.pk}/revoke/")
    response = client.post(f"{URL}keys/add/", _form(agent_id="agent_test_shopper", key_id="k1"))
    assert response.status_code == 422
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_revoking_a_key_writes_the_key_change_record_once(client_for, site, key):
    client = client_for("owner")
    response = client.post(f"{URL}keys/{key.pk}/revoke/")
    assert response.status_code == 303
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert client.post(f"{URL}keys/{key.pk}/revoke/").status_code == 303  # idempotent
    records = _key_changes(site)
    assert [('"action":"revoke"' in r) for r in records] == [False, True]
    page = client.get(URL).content.decode()
    assert "Revoked" in page and "mandates signed with it are refused" in page
    assert f"{URL}keys/{key.pk}/revoke/" not in page


def test_revoke_and_deactivate_ask_for_confirmation(client_for, key):
    page = client_for("owner").get(URL).content.decode()
    revoke = page[page.index(f'action="{URL}keys/{key.pk}/revoke/"') - 200 :]
    assert "data-confirm=" in revoke[: revoke.index("</form>")]
    deactivate = page[page.index(f'action="{URL}{key.agent.pk}/deactivate/"') :]
    assert "data-confirm=" in deactivate[: deactivate.index(">")]


def test_it_deactivates_and_reactivates_an_agent(client_for, key):
    client = client_for("owner")
    agent = key.agent
    assert client.post(f"{URL}{agent.pk}/deactivate/").status_code == 303
    agent.refresh_from_db()
    assert not agent.active
    page = client.get(URL).content.decode()
    assert "Deactivated" in page and f"{URL}{agent.pk}/reactivate/" in page
    # A deactivated agent gets no new token (as from `manage.py agents token`).
    refused = client.post(f"{URL}{agent.pk}/token/", follow=True)
    assert refused.redirect_chain == [(URL, 303)]
    assert "is deactivated: reactivate it first" in refused.content.decode()
    assert not AgentToken.objects.exists()
    client.post(f"{URL}{agent.pk}/reactivate/")
    agent.refresh_from_db()
    assert agent.active


def test_a_token_is_shown_once_and_only_its_hash_is_stored(client_for, key, caplog):
    caplog.set_level(logging.DEBUG)
    client = client_for("owner")
    issue_agent_token(
        agent=key.agent, actor=site_owner(key.agent.site), second_factor=two_factor.OPERATOR
    )  # an earlier one, revoked below
    AgentToken.objects.update(revoked_at=timezone.now())
    response = client.post(f"{URL}{key.agent.pk}/token/")
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    body = response.content.decode()
    token = body.split('<code class="token" id="token">')[1].split("</code>")[0]
    assert token.startswith("sill_at_") and "shown only once" in body
    stored = AgentToken.objects.get(revoked_at__isnull=True)
    assert stored.token_sha256 == token_sha256(token) and token not in stored.token_sha256
    assert token not in caplog.text
    page = client.get(URL).content.decode()
    assert token not in page and "1 active token" in page


def test_posts_need_a_csrf_token(members, site, key):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    assert client.post(f"{URL}keys/add/", _form()).status_code == 403
    assert client.post(f"{URL}keys/{key.pk}/revoke/").status_code == 403
    assert client.post(f"{URL}{key.agent.pk}/token/").status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None and AgentKey.objects.count() == 1
    assert not AgentToken.objects.exists()
