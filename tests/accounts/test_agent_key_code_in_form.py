"""Where the site requires two factors and the session's code is stale, the add-key form on
Settings → Agents carries the code field itself: one submit verifies the code and adds the key;
a wrong or missing code gives the form back as typed with the error under the code field,
nothing saved, and a wrong one counts as a failed login as on the verify page."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from axes.models import AccessAttempt
from django.utils import timezone

from audit.models import AuditRecord
from sill.accounts.models import AgentKey
from sill.accounts.views_two_factor import WRONG_CODE
from tests.accounts.test_agents_page import HX, PUBLIC
from tests.accounts.two_factor_helpers import (
    VERIFY,
    code_for,
    confirmed_device,
    require_two_factor,
    verified_client,
)

pytestmark = pytest.mark.django_db

URL = "/settings/agents/"
ADD = "/settings/agents/keys/add/"
FORM = {
    "agent_id": "agent_shopper",
    "key_id": "key-2026-12",
    "public_key": PUBLIC,
    "valid_from": "2026-12-01T09:30",
    "valid_until": "2027-06-30T18:00",
}
CODE_FIELD = 'name="code"'


def _stale():
    return time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False)


def _failures(user) -> int:
    return sum(
        AccessAttempt.objects.filter(username=user.get_username()).values_list(
            "failures_since_start", flat=True
        )
    )


def _kept_as_typed(html: str) -> None:
    for name in ("agent_id", "key_id", "public_key", "valid_from", "valid_until"):
        assert f'name="{name}" value="{FORM[name]}"' in html, name


@pytest.fixture
def owner(members, site):
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    return members["owner"], device, verified_client(members["owner"], device)


def test_it_shows_the_code_field_only_when_the_code_is_stale(owner):
    _, _, client = owner
    assert CODE_FIELD not in client.get(URL).content.decode()
    with _stale():
        html = client.get(URL).content.decode()
    assert CODE_FIELD in html and 'autocomplete="one-time-code"' in html


def test_the_setting_off_asks_for_no_code(client_for, site):
    assert CODE_FIELD not in client_for("owner").get(URL).content.decode()


def test_one_submit_verifies_the_code_and_adds_the_key(owner, site):
    _, device, client = owner
    with _stale():
        response = client.post(ADD, {**FORM, "code": code_for(device)})
        assert response.status_code == 303 and response["Location"] == URL
        key = AgentKey.objects.get(agent__site=site)
        assert (key.agent.agent_id, key.key_id) == ("agent_shopper", "key-2026-12")
        # The session is fresh again, as after the verify page: the next key needs no code.
        assert CODE_FIELD not in client.get(URL).content.decode()
        assert client.post(ADD, {**FORM, "key_id": "key-2027-01"}).status_code == 303


@pytest.mark.parametrize("headers", [{}, HX], ids=["page", "htmx"])
def test_a_wrong_code_gives_the_form_back_as_typed_and_counts_as_a_failed_login(
    owner, site, headers
):
    membership, _, client = owner
    records = AuditRecord.objects.filter(site=site).count()
    with _stale():
        response = client.post(ADD, {**FORM, "code": "000000"}, **headers)
        html = response.content.decode()
        assert response.status_code == 422
        _kept_as_typed(html)
        assert 'id="add-code-error"' in html and WRONG_CODE.replace("'", "&#x27;") in html
        assert 'aria-describedby="add-code-error"' in html
        assert not AgentKey.objects.filter(agent__site=site).exists()
        assert AuditRecord.objects.filter(site=site).count() == records
        assert _failures(membership.user) == 1
        # The verify page's wrong code is counted the same way, towards the same lockout.
        assert client.post(VERIFY, {"code": "000000"}).status_code == 422
        assert _failures(membership.user) == 2


def test_a_form_sent_without_the_code_after_it_went_stale_asks_for_it_in_place(owner, site):
    """The page was loaded while the code was fresh (no code field); the form comes back with
    the field and what was typed, not the refusal page, and no failed login is counted."""
    membership, device, client = owner
    with _stale():
        response = client.post(ADD, FORM, **HX)
        html = response.content.decode()
        assert response.status_code == 422
        assert CODE_FIELD in html and "This change needs a fresh code" in html
        _kept_as_typed(html)
        assert not AgentKey.objects.filter(agent__site=site).exists()
        assert _failures(membership.user) == 0
        assert client.post(ADD, {**FORM, "code": code_for(device)}, **HX).status_code == 200
    assert AgentKey.objects.filter(agent__site=site).count() == 1


def test_the_lockout_answers_before_the_code_is_checked(owner, site, settings):
    _, device, client = owner
    with _stale():
        statuses = [
            client.post(ADD, {**FORM, "code": "000000"}).status_code
            for _ in range(settings.SILL_LOGIN_FAILURE_LIMIT)
        ]
        assert statuses[-1] == 429
        assert client.post(ADD, {**FORM, "code": code_for(device)}).status_code == 429
    assert not AgentKey.objects.filter(agent__site=site).exists()
