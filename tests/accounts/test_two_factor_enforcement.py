"""Where a site requires two factors, owners and admins need a verified session to decide held
refunds or change rules, rails, members or keys (403 with words until then; GETs stay
readable); the most sensitive changes need a code from the last five minutes; the setting
off lets them through."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from sill.accounts.models import Agent, AgentKey, AgentToken, MemberInvite, Membership, Role
from sill.rails.models import RailAccount
from tests.accounts.test_agents_page import PUBLIC
from tests.accounts.two_factor_helpers import (
    VERIFY,
    code_for,
    confirmed_device,
    require_two_factor,
    verified_client,
)
from tests.rails.stripe_events import stripe_account

pytestmark = pytest.mark.django_db

# (path, form) of one change of each kind; unknown ids are fine: the gate runs first, and a
# verified session then gets the view's own answer (404, 422, 303), never the 403 page.
CHANGES = [
    ("/held/01NOSUCHREFUND000000000000/approve/", {}),
    ("/held/01NOSUCHREFUND000000000000/reject/", {"reason": "no"}),
    ("/rules/auto-refund/", {}),
    ("/rules/no-such-rule/mode/", {"mode": "off"}),
    ("/rules/templates/r07/apply/", {}),
    ("/settings/rails/mock/enabled/", {"enabled": "on"}),
    ("/settings/rails/shopify/", {}),
    ("/settings/members/add/", {"email": "new@roasters.example", "role": "staff"}),
    ("/settings/agents/keys/add/", {"agent_id": "a"}),
    ("/settings/agents/999/deactivate/", {}),
]
READABLE = ["/held/", "/rules/", "/settings/rails/", "/settings/members/", "/settings/agents/"]
WORDS = "Two-factor authentication needed"


def _refused(response) -> bool:
    return response.status_code == 403 and WORDS in response.content.decode()


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_it_refuses_changes_without_an_authenticator(client_for, site, persona):
    require_two_factor(site)
    client = client_for(persona)
    for path, form in CHANGES:
        response = client.post(path, form)
        assert _refused(response), path
        assert "/settings/account/#two-factor" in response.content.decode()
    for path in READABLE:
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_it_refuses_an_unverified_session_then_lets_the_verified_one(
    client_for, members, site, persona
):
    require_two_factor(site)
    device = confirmed_device(members[persona].user)
    unverified = client_for(persona)
    for path, form in CHANGES:
        response = unverified.post(path, form)
        assert _refused(response), path
        assert VERIFY in response.content.decode()
    verified = verified_client(members[persona], device)
    for path, form in CHANGES:
        assert verified.post(path, form).status_code != 403, path


def test_htmx_gets_the_refusal_as_a_partial(client_for, members, site):
    require_two_factor(site)
    response = client_for("owner").post(
        "/settings/rails/mock/enabled/", {"enabled": "on"}, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert response.status_code == 403 and WORDS in html and "<html" not in html


def test_the_setting_off_lets_them_through(client_for, site):
    assert not site.require_two_factor  # the test settings' default (see sill/settings.py)
    client = client_for("admin")
    for path, form in CHANGES:
        assert not _refused(client.post(path, form)), path


def test_it_does_not_ask_reviewers_or_staff_for_what_they_cannot_do_anyway(client_for, site):
    require_two_factor(site)
    response = client_for("reviewer").post("/held/01NOSUCHREFUND000000000000/approve/")
    assert response.status_code == 403 and WORDS not in response.content.decode()


def test_the_rules_api_needs_a_verified_session(members, site):
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    url = f"/api/v1/sites/{site.pk}/rules/from-template"
    client = Client()
    client.force_login(members["owner"].user)
    refused = client.post(url, json.dumps({"templateId": "r07"}), content_type="application/json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "two_factor_required"
    preview = json.dumps({"templateId": "r07", "dryRun": True})
    assert client.post(url, preview, content_type="application/json").status_code == 200
    verified = verified_client(members["owner"], device)
    ok = verified.post(url, json.dumps({"templateId": "r07"}), content_type="application/json")
    assert ok.status_code == 201


# --- a fresh code for the most sensitive changes --------------------------------------------

SENSITIVE = [
    ("/settings/rails/stripe/", {"mode": "live", "secret_key": ""}),
    ("/settings/rails/stripe/", {"mode": "test", "secret_key": "sk_test_new"}),
    # Before: a new webhook signing secret (with which events can be forged) needed no code.
    ("/settings/rails/stripe/", {"mode": "test", "webhook_secrets": "whsec_new"}),
    (
        "/settings/rails/shopify/",
        {"shop_domain": "roasters.myshopify.com", "webhook_secrets": "shpss_new"},
    ),
    (
        "/settings/rails/woocommerce/",
        {"store_url": "https://shop.example", "webhook_secret": "new-woo-secret"},
    ),
    ("/settings/members/add/", {"email": "boss@roasters.example", "role": "owner"}),
]


@pytest.mark.parametrize(("path", "form"), SENSITIVE)
def test_it_asks_for_a_fresh_code_for_the_most_sensitive_changes(members, site, path, form):
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    client = verified_client(members["owner"], device)
    assert not _refused(client.post(path, form))  # verified just now: fresh
    later = timezone.now() + timedelta(minutes=6)
    with time_machine.travel(later, tick=False):
        response = client.post(path, form)
        assert _refused(response) and "fresh code" in response.content.decode()
        # An ordinary change still works in the verified session.
        assert not _refused(client.post("/settings/rails/mock/enabled/", {"enabled": "on"}))
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        assert not _refused(client.post(path, form))


@pytest.mark.parametrize("mode", ["live", "test"])
def test_switching_on_a_live_rail_asks_for_a_fresh_code(members, site, mode):
    """Saving a rail in live mode asks for one; switching an account that is saved live back
    on (an owner switched it off, say during an incident) lets real money move just as much."""
    require_two_factor(site)
    stripe_account(site, mode=mode, enabled=False)
    device = confirmed_device(members["admin"].user)
    client = verified_client(members["admin"], device)
    url = "/settings/rails/stripe/enabled/"

    def enabled() -> bool:
        return RailAccount.objects.get(site=site, rail="stripe").enabled

    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        response = client.post(url, {"enabled": "1"})
        if mode == "test":
            assert response.status_code == 303 and enabled()
            return
        assert _refused(response) and "fresh code" in response.content.decode()
        assert not enabled()
        # Switching it off asks for nothing more than a verified session.
        assert client.post(url, {"enabled": "0"}).status_code == 303
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        assert client.post(url, {"enabled": "1"}).status_code == 303 and enabled()


def test_making_someone_owner_asks_for_a_fresh_code(members, site):
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    client = verified_client(members["owner"], device)
    target: Membership = members["admin"]
    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        url = f"/settings/members/{target.pk}/change/"
        assert _refused(client.post(url, {"role": "owner"}))
        target.refresh_from_db()
        assert target.role == Role.ADMIN
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        assert client.post(url, {"role": "owner"}).status_code == 303
        target.refresh_from_db()
        assert target.role == Role.OWNER


def test_adding_an_agent_key_or_issuing_a_token_asks_for_a_fresh_code(members, site):
    """Whoever holds an agent key signs refund mandates that move money, and a token reads
    the agent's refunds for as long as it lives: a session whose code is older than the window
    makes neither (both took any code entered this session)."""
    require_two_factor(site)
    agent = Agent.objects.create(site=site, agent_id="agent_shopper", name="Shopper")
    device = confirmed_device(members["admin"].user)
    client = verified_client(members["admin"], device)
    add_key = "/settings/agents/keys/add/"
    key_form = {
        "agent_id": "agent_shopper",
        "key_id": "key-2026-01",
        "public_key": PUBLIC,
        "valid_from": "2026-01-01T09:30",
        "valid_until": "",
    }
    issue_token = f"/settings/agents/{agent.pk}/token/"
    records = AuditRecord.objects.filter(site=site).count()
    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        refused_token = client.post(issue_token)
        assert _refused(refused_token) and "fresh code" in refused_token.content.decode()
        # The key form is given back with the code field on it (test_agent_key_code_in_form).
        refused_key = client.post(add_key, key_form)
        assert refused_key.status_code == 422 and "fresh code" in refused_key.content.decode()
        assert not AgentKey.objects.filter(agent__site=site).exists()
        assert not AgentToken.objects.filter(agent=agent).exists()
        assert AuditRecord.objects.filter(site=site).count() == records
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        assert client.post(add_key, key_form).status_code == 303
        issued = client.post(issue_token)
        assert issued.status_code == 200 and "sill_at_" in issued.content.decode()
    assert AgentKey.objects.get(agent=agent).key_id == "key-2026-01"
    assert AgentToken.objects.filter(agent=agent).count() == 1


def test_widening_an_agent_asks_for_a_fresh_code_and_its_brake_does_not(members, site):
    """A session whose code is older than the window (a stolen one, say) may still deactivate
    an agent, switch its refunds off and lower its caps in one click each, but may not widen
    what the agent's keys can do with money: reactivating it, switching refunds on, raising or
    lifting a cap each took a verified session alone."""
    require_two_factor(site)
    agent = Agent.objects.create(
        site=site,
        agent_id="agent_shopper",
        name="Shopper",
        refund_enabled=True,
        refund_cap_minor=5000,
        daily_refund_cap_minor=20000,
    )
    device = confirmed_device(members["admin"].user)
    client = verified_client(members["admin"], device)
    refunds = f"/settings/agents/{agent.pk}/refunds/"
    reactivate = f"/settings/agents/{agent.pk}/reactivate/"

    def settings() -> tuple[bool, bool, int | None, int | None]:
        agent.refresh_from_db()
        return (
            agent.active,
            agent.refund_enabled,
            agent.refund_cap_minor,
            agent.daily_refund_cap_minor,
        )

    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        brake = [
            (refunds, {"refund_enabled": "on", "cap": "40.00", "daily_cap": "200.00"}),
            (refunds, {"cap": "40.00", "daily_cap": "150.00"}),
            (f"/settings/agents/{agent.pk}/deactivate/", {}),
        ]
        for url, form in brake:
            assert client.post(url, form).status_code == 303, (url, form)
        assert settings() == (False, False, 4000, 15000)
        records = AuditRecord.objects.filter(site=site).count()
        # Each a widening, even beside a narrowing; with a fresh code they run in this order.
        widen = [
            (reactivate, {}),
            (refunds, {"refund_enabled": "on", "cap": "40.00", "daily_cap": "150.00"}),
            (refunds, {"cap": "40.01", "daily_cap": "150.00"}),
            (refunds, {"cap": "10.00", "daily_cap": "150.01"}),
            (refunds, {"cap": "", "daily_cap": "150.00"}),
            (refunds, {"refund_enabled": "on", "cap": "40.00", "daily_cap": ""}),
        ]
        for url, form in widen:
            response = client.post(url, form)
            assert _refused(response) and "fresh code" in response.content.decode(), (url, form)
        assert settings() == (False, False, 4000, 15000)
        assert AuditRecord.objects.filter(site=site).count() == records
        # The settings as they are (the page's own form, posted again) ask for nothing.
        assert client.post(refunds, {"cap": "40.00", "daily_cap": "150.00"}).status_code == 303
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        for url, form in widen:
            assert client.post(url, form).status_code == 303, (url, form)
    assert settings() == (True, True, 4000, None)


def test_the_refusal_page_takes_the_code_itself_and_goes_back_where_it_was_asked(members, site):
    """Seen: a refused token was a bare warning and a Back link, no heading, the code on
    another page; now the page is titled, holds the code field and returns to the agents."""
    require_two_factor(site)
    agent = Agent.objects.create(site=site, agent_id="agent_shopper", name="Shopper")
    device = confirmed_device(members["owner"].user)
    client = verified_client(members["owner"], device)
    agents = "http://testserver/settings/agents/"
    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        refused = client.post(f"/settings/agents/{agent.pk}/token/", HTTP_REFERER=agents)
        html = refused.content.decode()
        assert refused.status_code == 403
        assert "<h1>Enter a fresh code</h1>" in html
        assert f'<form method="post" action="{VERIFY}">' in html
        assert f'<input type="hidden" name="next" value="{agents}">' in html
        assert 'name="code"' in html and 'autocomplete="one-time-code"' in html
        verified = client.post(VERIFY, {"code": code_for(device), "next": agents})
        assert verified.status_code == 303 and verified["Location"].endswith("/settings/agents/")
        assert client.post(f"/settings/agents/{agent.pk}/token/").status_code == 200


def test_another_sites_owner_is_not_let_in_by_a_verified_session(members, site, other_site):
    require_two_factor(site)
    device = confirmed_device(members["outsider"].user)
    client = verified_client(members["outsider"], device)
    assert client.post("/settings/members/999999/change/", {"role": "owner"}).status_code == 404


@pytest.mark.parametrize(
    ("referer", "back"),
    [
        ("https://testserver/held/", "https://testserver/held/"),
        ("http://testserver/held/", "/"),  # over HTTPS, never back to http://
        ("https://elsewhere.example/", "/"),
    ],
)
def test_the_refusals_back_link_stays_on_sill_over_https(client_for, site, referer, back):
    require_two_factor(site)
    response = client_for("owner").post(
        "/rules/auto-refund/", {}, secure=True, HTTP_REFERER=referer
    )
    assert _refused(response)
    assert f'<a href="{back}">Back</a>' in response.content.decode()


def test_adding_or_promoting_someone_who_may_refund_or_manage_asks_for_a_fresh_code(
    members, site, mailoutbox
):
    """A stolen session could invite its thief as an admin (or promote a staff account it
    holds): the new admin then enrols a phone of their own and makes every fresh-code change
    with their own codes. Only owners were guarded; now a new admin, a promotion to admin and
    staff given refunds each need a fresh code too, while a reviewer, staff without refunds
    and every demotion still need only the verified session."""
    require_two_factor(site)
    device = confirmed_device(members["owner"].user)
    client = verified_client(members["owner"], device)
    staff: Membership = members["reviewer"]  # neither refunds nor manages
    # An admin's invitation sent while the code was fresh, to be resent later.
    pending = {"email": "later@roasters.example", "role": "admin"}
    assert client.post("/settings/members/add/", pending).status_code == 303
    invite = MemberInvite.objects.get(email="later@roasters.example")
    with time_machine.travel(timezone.now() + timedelta(minutes=6), tick=False):
        neutral = [
            ("/settings/members/add/", {"email": "r@roasters.example", "role": "reviewer"}),
            ("/settings/members/add/", {"email": "s@roasters.example", "role": "staff"}),
            (f"/settings/members/{members['admin'].pk}/change/", {"role": "staff"}),
            (f"/settings/members/{members['staff'].pk}/change/", {"role": "staff"}),
        ]
        for url, form in neutral:
            assert client.post(url, form).status_code == 303, (url, form)
        records, invites, sent = (
            AuditRecord.objects.filter(site=site).count(),
            MemberInvite.objects.count(),
            len(mailoutbox),
        )
        widen = [
            ("/settings/members/add/", {"email": "thief@evil.example", "role": "admin"}),
            (
                "/settings/members/add/",
                {"email": "thief@evil.example", "role": "staff", "can_refund": "on"},
            ),
            (f"/settings/members/invites/{invite.pk}/resend/", {}),
            (f"/settings/members/{staff.pk}/change/", {"role": "admin"}),
            (f"/settings/members/{staff.pk}/change/", {"role": "staff", "can_refund": "on"}),
        ]
        for url, form in widen:
            response = client.post(url, form)
            assert _refused(response) and "fresh code" in response.content.decode(), (url, form)
        assert AuditRecord.objects.filter(site=site).count() == records
        assert MemberInvite.objects.count() == invites and len(mailoutbox) == sent
        staff.refresh_from_db()
        assert (staff.role, staff.can_refund) == (Role.REVIEWER, False)
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        for url, form in widen[1:]:
            assert client.post(url, form).status_code == 303, (url, form)
    staff.refresh_from_db()
    assert (staff.role, staff.can_refund) == (Role.STAFF, True)


def test_an_agents_caps_service_refuses_a_caller_that_does_not_say_who_acts(members, site):
    """The view asked for the fresh code and handed it to the service, which widened without
    one for any other caller (its refuse_widening was optional): now required, None refused."""
    from sill.accounts import two_factor
    from sill.accounts.services import set_agent_refunds

    agent = Agent.objects.create(site=site, agent_id="agent_shopper", name="Shopper")
    owner = members["owner"].user
    with pytest.raises(TypeError):
        set_agent_refunds(
            agent=agent, actor=owner, enabled=True, cap_minor=100, daily_cap_minor=None
        )
    stale = two_factor.Freshness(
        refused=two_factor.TwoFactorRequired(two_factor.TwoFactorRequired.NOT_FRESH)
    )
    with pytest.raises(TypeError, match="second_factor"):
        set_agent_refunds(
            agent=agent,
            actor=owner,
            enabled=True,
            cap_minor=100,
            daily_cap_minor=None,
            second_factor=None,
        )
    with pytest.raises(two_factor.TwoFactorRequired):
        set_agent_refunds(
            agent=agent,
            actor=owner,
            enabled=True,
            cap_minor=100,
            daily_cap_minor=None,
            second_factor=stale,
        )
    agent.refresh_from_db()
    assert not agent.refund_enabled
