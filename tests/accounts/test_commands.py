"""The management commands of DESIGN.md: members, agents (add-key, token, sign), demo."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from nacl.signing import SigningKey

from sill.accounts.models import AgentKey, AgentToken, Membership
from sill.accounts.services import b64url_encode, token_sha256

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_adds_a_member_with_a_password(site):
    _run("members", "add", "--site", site.id, "--email", "New@Example.com", "--role", "staff",
         "--can-refund", "--password", "a-long-password-1")  # fmt: skip
    membership = Membership.objects.get(user__username="new@example.com")
    assert (membership.role, membership.can_refund) == ("staff", True)
    login = {"username": "new@example.com", "password": "a-long-password-1"}
    assert Client().post("/login/", login).status_code == 302  # through the login page (axes)


def test_it_refuses_an_unknown_site_or_role(site):
    with pytest.raises(CommandError):
        _run("members", "add", "--site", "nope", "--email", "a@b.c", "--role", "owner")
    with pytest.raises(CommandError):
        _run("members", "add", "--site", site.id, "--email", "a@b.c", "--role", "god")


def test_it_adds_an_agent_key_and_refuses_a_different_key_under_the_same_id(site):
    public = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
    out = _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
               "--new-agent", "--public-key", public,
               "--valid-from", "2026-01-01T00:00:00Z")  # fmt: skip
    assert "valid from 2026-01-01" in out
    key = AgentKey.objects.get(key_id="k1")
    assert key.valid_from == datetime(2026, 1, 1, tzinfo=UTC)
    from audit.models import AuditRecord

    record = AuditRecord.objects.get(site=site, kind="key_change")
    assert public in record.payload and '"action":"add"' in record.payload
    other = b64url_encode(bytes(SigningKey(bytes(range(32))).verify_key))
    with pytest.raises(CommandError, match="another public key"):
        _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
             "--public-key", other)  # fmt: skip
    with pytest.raises(CommandError):
        _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k2",
             "--public-key", "c2hvcnQ")  # fmt: skip


def test_adding_a_key_for_an_agent_that_does_not_exist_is_refused_and_writes_nothing(site, agent):
    # An operator's typo in --agent created a second agent holding the new key, with its own
    # signed records, instead of saying there is no such agent.
    from audit.models import AuditRecord
    from sill.accounts.models import Agent

    public = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
    records = AuditRecord.objects.filter(site=site).count()
    with pytest.raises(CommandError) as refused:
        _run("agents", "add-key", "--site", site.id, "--agent", "agent_test_shoper",
             "--key-id", "k1", "--public-key", public)  # fmt: skip
    assert str(refused.value) == (
        f"no agent agent_test_shoper on {site.id} (its agents: agent_test_shopper); "
        "to create it with this key, add --new-agent"
    )
    assert list(Agent.objects.filter(site=site).values_list("agent_id", flat=True)) == [
        "agent_test_shopper"
    ]
    assert not AgentKey.objects.filter(key_id="k1").exists()
    assert AuditRecord.objects.filter(site=site).count() == records

    _run("agents", "add-key", "--site", site.id, "--agent", agent.agent_id, "--key-id", "k1",
         "--public-key", public)  # fmt: skip
    assert AgentKey.objects.get(key_id="k1").agent == agent


def test_it_issues_a_token_shown_once_and_stored_hashed(site, agent):
    token = _run("agents", "token", "--site", site.id, "--agent", agent.agent_id).strip()
    stored = AgentToken.objects.get(agent=agent)
    assert stored.token_sha256 == token_sha256(token) and token not in stored.token_sha256
    response = Client().get("/api/v1/agent", headers={"Authorization": f"Bearer {token}"})
    assert response.json() == {"agent_id": agent.agent_id, "site_id": site.id, "name": agent.name}


def test_it_refuses_a_token_for_a_deactivated_agent_as_the_page_does(site, agent):
    """Seen: Settings → Agents refused to issue a token for a deactivated agent ("reactivate
    it first"), while ``manage.py agents token`` printed one (and wrote its record): a token
    the API refuses while the agent is off, and that works the moment it is reactivated.
    The command now refuses alike, and nothing is stored or recorded."""
    from audit.models import AuditRecord

    type(agent).objects.filter(pk=agent.pk).update(active=False)
    records = AuditRecord.objects.filter(site=site).count()
    with pytest.raises(CommandError, match="is deactivated: reactivate it first"):
        _run("agents", "token", "--site", site.id, "--agent", agent.agent_id)
    assert not AgentToken.objects.filter(agent=agent).exists()
    assert AuditRecord.objects.filter(site=site).count() == records


def test_the_demo_key_signs_a_mandate_that_the_api_accepts(
    settings, django_capture_on_commit_callbacks
):
    from refunds.demo import DEMO_ORDER_MANDATE, load_demo

    result = load_demo()
    intent = {
        "action": "request_refund",
        "merchant": "northwind-coffee.example",
        "original_mandate_id": DEMO_ORDER_MANDATE,
        "reason_code": "wrong_item",
        "scope": "full",
        "max_amount": 89.00,
        "currency": "USD",
    }
    body = _run(
        "agents", "sign", "--key-file", str(result.key_file), "--intent", json.dumps(intent)
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/api/v1/mandates", data=body.strip(), content_type="application/json"
        )
    assert response.status_code == 201, response.content
    assert response.json()["decision"] == "approved" and response.json()["amount"] == "89.00"


def test_the_demo_is_idempotent():
    from refunds.demo import load_demo
    from sill.orders.models import Order

    load_demo()
    counts = (Order.objects.count(), Membership.objects.count(), AgentKey.objects.count())
    out = _run("demo")
    assert "owner@northwind-coffee.example" in out
    assert counts == (Order.objects.count(), Membership.objects.count(), AgentKey.objects.count())
    order = Order.objects.get(source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN")
    assert (order.total_minor, order.currency, order.items.count()) == (8900, "USD", 3)
    assert order.placed_by_agent.agent_id == "agent_acme_shopper"
    assert set(Order.objects.values_list("currency", flat=True)) == {"USD", "EUR", "JPY"}
    assert len(set(Order.objects.values_list("status", flat=True))) >= 4


def test_running_the_demo_again_keeps_its_members_signed_in():
    # `make run` loads the demo every time: it set every demo login's password afresh, and a
    # new password ends the user's sessions, so each restart signed the merchant out of every
    # browser. A password someone changed is still put back to the one `make run` prints.
    from refunds.demo import DEMO_PASSWORD, load_demo

    load_demo()
    owner, staff = Client(), Client()
    for client, email in ((owner, "owner@northwind-coffee.example"),
                          (staff, "staff@northwind-coffee.example")):  # fmt: skip
        login = {"username": email, "password": DEMO_PASSWORD}
        assert client.post("/login/", login).status_code == 302
        assert client.get("/orders/").status_code == 200
    user = get_user_model().objects.get(username="staff@northwind-coffee.example")
    user.set_password("a-password-of-their-own-7")
    user.save()

    _run("demo")
    assert owner.get("/orders/").status_code == 200  # still signed in
    login = {"username": "staff@northwind-coffee.example", "password": DEMO_PASSWORD}
    assert Client().post("/login/", login).status_code == 302  # the printed login works again


def test_the_demo_runs_again_after_the_merchant_reuses_a_demo_reasons_name():
    # `make run` loads the demo every time: a second "Damaged in transit" elsewhere in the
    # tree (or the demo's own renamed in another case) made every later run fail.
    from refunds.demo import DEMO_SITE_ID, load_demo
    from refunds.models import Refund, RefundReason
    from refunds.reasons.services import add_reason, rename_reason

    site = load_demo().site
    assert site.pk == DEMO_SITE_ID
    owner = get_user_model().objects.get(username="owner@northwind-coffee.example")
    shipping = RefundReason.objects.get(site=site, code="not_received")
    add_reason(site=site, actor=owner, name="Damaged in transit", parent=shipping)
    stopped = RefundReason.objects.get(site=site, name="Stopped working")
    rename_reason(reason=stopped, actor=owner, name="stopped working")
    refunds = Refund.objects.count()
    load_demo()
    assert Refund.objects.count() == refunds
    names = list(RefundReason.objects.filter(site=site).values_list("name", flat=True))
    assert names.count("Damaged in transit") == 2
    assert "Stopped working" not in names and "stopped working" in names


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--valid-from", "yesterday", "--valid-from 'yesterday' is not an ISO 8601 time"),
        ("--valid-until", "2026-02-30T00:00:00Z", "--valid-until '2026-02-30T00:00:00Z' is not"),
    ],
)
def test_it_refuses_an_unreadable_validity_time_without_a_trace(site, option, value, words):
    # An operator's typo was a ValueError traceback, and nothing said which option it was.
    public = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
    with pytest.raises(CommandError, match=words):
        _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
             "--new-agent", "--public-key", public, option, value)  # fmt: skip
    assert not AgentKey.objects.filter(key_id="k1").exists()


def test_it_refuses_a_key_that_ends_before_it_starts_and_writes_nothing(site):
    # It was the database's check constraint as an IntegrityError traceback.
    from audit.models import AuditRecord
    from sill.accounts.models import Agent

    public = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
    with pytest.raises(CommandError, match="--valid-until must be after --valid-from"):
        _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
             "--new-agent", "--public-key", public, "--valid-from", "2026-03-01T00:00:00Z",
             "--valid-until", "2026-02-01T00:00:00Z")  # fmt: skip
    assert not Agent.objects.filter(site=site, agent_id="agent_new").exists()
    assert not AuditRecord.objects.filter(site=site).exists()


def test_adding_a_key_again_says_when_the_stored_one_starts(site):
    # The second run printed "valid from <now>", a time the stored key does not have.
    public = b64url_encode(bytes(SigningKey(bytes(32)).verify_key))
    _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
         "--new-agent", "--public-key", public, "--valid-from", "2026-01-01T00:00:00Z")  # fmt: skip
    out = _run("agents", "add-key", "--site", site.id, "--agent", "agent_new", "--key-id", "k1",
               "--public-key", public)  # fmt: skip
    assert "already registered" in out and "valid from 2026-01-01T00:00:00Z" in out
    assert AgentKey.objects.filter(key_id="k1").count() == 1


@pytest.mark.parametrize("password", ["x", "password123"])
def test_it_refuses_a_password_the_validators_refuse_and_writes_nothing(site, password):
    # An operator could give an owner the password "x": the login and invitation forms apply
    # AUTH_PASSWORD_VALIDATORS, the command did not (Django's createsuperuser does).
    with pytest.raises(CommandError, match="password"):
        _run("members", "add", "--site", site.id, "--email", "weak@example.com", "--role",
             "owner", "--password", password)  # fmt: skip
    assert not get_user_model().objects.filter(username="weak@example.com").exists()


@pytest.mark.parametrize(
    ("key_file", "args", "words"),
    [
        ({"agent_id": "a", "key_id": "k", "private_key": "x"}, [], "lacks site_id"),
        (["not", "an", "object"], [], "lacks site_id, agent_id, key_id, private_key"),
        ({"site_id": "s", "agent_id": "a", "key_id": 7, "private_key": "x"}, [], "lacks key_id"),
        (None, ["--window", "0"], "--window is seconds from 1 to 300"),
        (None, ["--window", "-60"], "--window is seconds from 1 to 300"),
        (None, ["--window", "301"], "--window is seconds from 1 to 300"),
    ],
)
def test_signing_refuses_a_key_file_without_its_fields_or_a_window_sill_refuses(
    tmp_path, key_file, args, words
):
    """A key file without its ids crashed with a KeyError trace; a window of 0 or below, or
    past what Sill accepts, signed a mandate every server refuses."""
    whole = {
        "site_id": "01TESTSITE0000000000000001", "agent_id": "a", "key_id": "k",
        "private_key": b64url_encode(bytes(SigningKey.generate())),
    }  # fmt: skip
    path = tmp_path / "key.json"
    path.write_text(json.dumps(whole if key_file is None else key_file))
    with pytest.raises(CommandError, match=words):
        call_command("agents", "sign", "--key-file", str(path), "--intent", "{}", *args)
