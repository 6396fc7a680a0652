"""The services that hand out an agent's or a member's credential, undo an agent's brake or
let a rail move real money judge the fresh code themselves, as the rules, members and agent
caps services do.

Their views asked ``two_factor.require_fresh`` before calling them, so any other caller (a
task, a script, an API, a new page) issued a token, added a key, reactivated an agent, saved a
rail key or webhook secret, saved a rail live or switched a live rail on without a code from
the last few minutes. Now each takes ``second_factor`` (required: ``None`` or none at all is a
``TypeError``) and refuses a stale one with ``TwoFactorRequired``, nothing written and no
provider called; the brakes (deactivating, switching a rail off) stay free. Each service is
called directly here, with no view in front of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from nacl.signing import SigningKey

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, AgentToken, Membership, MemberToken, Site
from sill.accounts.services import (
    add_agent_key,
    b64url_encode,
    issue_agent_token,
    issue_member_token,
    register_agent_key,
    set_agent_active,
)
from sill.rails.models import RailAccount, RailMode
from sill.rails.paypal.connect import configure_paypal
from sill.rails.services import configure_stripe, set_rail_enabled
from sill.rails.shopify.connect import configure_shopify
from sill.rails.woocommerce.connect import configure_woocommerce
from tests.accounts.two_factor_helpers import confirmed_device, require_two_factor, verified_client
from tests.rails import paypal_stub, shopify_stub, woo_stub
from tests.threads import someone_waits

STALE = two_factor.Freshness(
    refused=two_factor.TwoFactorRequired(two_factor.TwoFactorRequired.NOT_FRESH)
)
LIVE_KEY = "sk_live_" + "b" * 24


@dataclass
class World:
    site: Site
    owner: Any
    agent: Agent
    stack: ExitStack
    # How many calls the case's provider stub has answered (0: none called).
    provider_calls: Callable[[], int] = lambda: 0


# Each case sets its object up and returns the widening call, given ``second_factor`` (or not).
Call = Callable[..., object]


def _live_stripe(site: Site, *, enabled: bool) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", mode=RailMode.LIVE, enabled=enabled)
    account.set_secret(LIVE_KEY)
    account.save()
    return account


def _issue_agent_token(w: World) -> Call:
    return lambda **sf: issue_agent_token(agent=w.agent, actor=w.owner, **sf)


def _issue_member_token(w: World) -> Call:
    staff = Membership.objects.get(site=w.site, role="staff")
    return lambda **sf: issue_member_token(membership=staff, actor=w.owner, **sf)


def _register_agent_key(w: World) -> Call:
    public = b64url_encode(bytes(SigningKey.generate().verify_key))
    return lambda **sf: register_agent_key(
        site=w.site, actor=w.owner, agent_id=w.agent.agent_id, key_id="key-2",
        public_key_b64url=public, valid_from=timezone.now() - timedelta(minutes=1), **sf,
    )  # fmt: skip


def _add_agent_key(w: World) -> Call:
    public = bytes(SigningKey.generate().verify_key)
    return lambda **sf: add_agent_key(
        site=w.site, agent_id="agent_new", key_id="key-1", public_key=public,
        valid_from=timezone.now() - timedelta(minutes=1), actor=w.owner, **sf,
    )  # fmt: skip


def _reactivate_agent(w: World) -> Call:
    Agent.objects.filter(pk=w.agent.pk).update(active=False)
    return lambda **sf: set_agent_active(agent=w.agent, actor=w.owner, active=True, **sf)


def _switch_on_a_live_rail(w: World) -> Call:
    _live_stripe(w.site, enabled=False)
    return lambda **sf: set_rail_enabled(
        site=w.site, actor=w.owner, rail="stripe", enabled=True, **sf
    )


def _stripe_new_key(w: World) -> Call:
    return lambda **sf: configure_stripe(
        site=w.site, actor=w.owner, secret_key="sk_test_" + "a" * 24, connected_account="",
        mode="test", **sf,
    )  # fmt: skip


def _stripe_new_webhook_secret(w: World) -> Call:
    account = RailAccount(site=w.site, rail="stripe", enabled=False)
    account.set_secret("sk_test_" + "a" * 24)
    account.save()
    return lambda **sf: configure_stripe(
        site=w.site, actor=w.owner, secret_key="", connected_account="", mode="test",
        webhook_secrets="whsec_forged", **sf,
    )  # fmt: skip


def _stripe_live_mode(w: World) -> Call:
    _live_stripe(w.site, enabled=True)
    return lambda **sf: configure_stripe(
        site=w.site, actor=w.owner, secret_key="", connected_account="acct_1Other", mode="live",
        **sf,
    )  # fmt: skip


def _configure_shopify(w: World) -> Call:
    shop = w.stack.enter_context(shopify_stub.StubServer())
    w.provider_calls = lambda: len(shop.requests)
    return lambda **sf: configure_shopify(
        site=w.site, actor=w.owner, shop_domain=shopify_stub.SHOP,
        access_token=shopify_stub.TOKEN, api_base=shop.url, **sf,
    )  # fmt: skip


def _configure_paypal(w: World) -> Call:
    paypal = w.stack.enter_context(paypal_stub.StubServer())
    w.provider_calls = lambda: paypal.token_requests
    return lambda **sf: configure_paypal(
        site=w.site, actor=w.owner, client_id=paypal_stub.CLIENT_ID,
        client_secret=paypal_stub.CLIENT_SECRET, mode="test", webhook_id=paypal_stub.WEBHOOK_ID,
        api_base=paypal.url, **sf,
    )  # fmt: skip


def _configure_woocommerce(w: World) -> Call:
    store = w.stack.enter_context(woo_stub.StubServer())
    w.provider_calls = lambda: len(store.auth_seen)
    return lambda **sf: configure_woocommerce(
        site=w.site, actor=w.owner, store_url=store.url, consumer_key=woo_stub.CONSUMER_KEY,
        consumer_secret=woo_stub.CONSUMER_SECRET, webhook_secret="", **sf,
    )  # fmt: skip


WIDENING: dict[str, Callable[[World], Call]] = {
    "issue_agent_token": _issue_agent_token,
    "issue_member_token": _issue_member_token,
    "register_agent_key": _register_agent_key,
    "add_agent_key": _add_agent_key,
    "set_agent_active(True)": _reactivate_agent,
    "set_rail_enabled(live)": _switch_on_a_live_rail,
    "configure_stripe(key)": _stripe_new_key,
    "configure_stripe(webhook secret)": _stripe_new_webhook_secret,
    "configure_stripe(live)": _stripe_live_mode,
    "configure_shopify": _configure_shopify,
    "configure_paypal": _configure_paypal,
    "configure_woocommerce": _configure_woocommerce,
}


@pytest.fixture
def world(
    site: Site, members: dict[str, Membership], agent: Agent, settings: Any
) -> Iterator[World]:
    settings.DEBUG = True  # the API address overrides (the loopback providers) need DEBUG
    settings.SILL_ALLOW_LIVE = True  # so a live save is refused for its code, not the setting
    with ExitStack() as stack:
        yield World(site=site, owner=members["owner"].user, agent=agent, stack=stack)


def _state() -> dict[str, Any]:
    """Everything these services write, every site's: equal before and after a refusal."""
    return {
        "audit": list(AuditRecord.objects.order_by("pk").values_list("pk", flat=True)),
        "rails": list(RailAccount.objects.order_by("pk").values()),
        "agents": list(Agent.objects.order_by("pk").values()),
        "keys": list(AgentKey.objects.order_by("pk").values()),
        "tokens": list(AgentToken.objects.order_by("pk").values_list("pk", flat=True)),
        "member_tokens": list(MemberToken.objects.order_by("pk").values_list("pk", flat=True)),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("case", WIDENING)
def test_a_direct_caller_with_a_stale_code_is_refused_and_nothing_is_written(
    world: World, case: str
) -> None:
    call = WIDENING[case](world)
    before = _state()
    with pytest.raises(two_factor.TwoFactorRequired) as refused:
        call(second_factor=STALE)
    assert refused.value.reason == two_factor.TwoFactorRequired.NOT_FRESH
    assert _state() == before
    assert world.provider_calls() == 0  # refused before the provider heard of it
    # The operator's tools (and a fresh session) go through.
    call(second_factor=two_factor.OPERATOR)
    assert _state() != before


@pytest.mark.django_db
@pytest.mark.parametrize("case", WIDENING)
def test_a_caller_that_does_not_say_who_acts_is_a_type_error(world: World, case: str) -> None:
    call = WIDENING[case](world)
    before = _state()
    with pytest.raises(TypeError, match="second_factor"):
        call(second_factor=None)
    with pytest.raises(TypeError, match="second_factor"):
        call()
    assert _state() == before


@pytest.mark.django_db
def test_the_brakes_need_no_fresh_code_but_still_say_who_acts(world: World) -> None:
    """Deactivating an agent and switching a live rail off work in one click from a session
    whose code is stale (a leaked key, an incident); a save that hands out nothing new (no
    key, no secret, test mode) is no widening either."""
    site, owner, agent = world.site, world.owner, world.agent
    assert not set_agent_active(agent=agent, actor=owner, active=False, second_factor=STALE).active
    # Already off: switching it off again is no reactivation, whatever the code.
    set_agent_active(agent=agent, actor=owner, active=False, second_factor=STALE)
    _live_stripe(site, enabled=True)
    set_rail_enabled(site=site, actor=owner, rail="stripe", enabled=False, second_factor=STALE)
    assert not RailAccount.objects.get(site=site, rail="stripe").enabled
    with pytest.raises(TypeError):
        set_rail_enabled(site=site, actor=owner, rail="stripe", enabled=False, second_factor=None)
    set_rail_enabled(site=site, actor=owner, rail="mock", enabled=True, second_factor=STALE)
    RailAccount.objects.filter(site=site, rail="stripe").delete()
    configure_stripe(
        site=site, actor=owner, secret_key="sk_test_" + "a" * 24, connected_account="",
        mode="test", second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    account = configure_stripe(
        site=site, actor=owner, secret_key="", connected_account="acct_1Connect", mode="test",
        second_factor=STALE,
    )  # fmt: skip
    assert account.connected_account == "acct_1Connect"


@pytest.mark.django_db(transaction=True)
def test_a_live_mode_saved_while_the_switch_waits_for_the_row_needs_the_fresh_code(
    members: dict[str, Membership], site: Site, settings: Any
) -> None:
    """Switching the Stripe rail on asked for a fresh code only if the account was live when
    the view looked, outside the row lock: an admin's stale session switching on a test-mode
    account while another admin saved it live (with a live key) switched the live account on
    without a code. The service now judges the account as it locked it."""
    settings.SILL_ALLOW_LIVE = True
    require_two_factor(site)
    account = RailAccount(site=site, rail="stripe", mode=RailMode.TEST, enabled=False)
    account.set_secret("sk_test_" + "a" * 24)
    account.save()
    admin = members["admin"]
    client = verified_client(admin, confirmed_device(admin.user))
    session = client.session
    session[two_factor.VERIFIED_AT_KEY] = int(time.time()) - 3600  # an hour ago: stale
    session.save()

    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    live_saved, switch_waits = threading.Event(), threading.Event()
    outcome: list[object] = []

    def save_live() -> None:
        """Another owner saves the account live, holding its row until the switch waits."""
        try:
            with transaction.atomic():
                configure_stripe(
                    site=site, actor=members["owner"].user, secret_key=LIVE_KEY,
                    connected_account="", mode="live", second_factor=two_factor.OPERATOR,
                )  # fmt: skip
                live_saved.set()
                assert switch_waits.wait(timeout=30)
        finally:
            connection.close()

    def switch_on() -> None:
        try:
            outcome.append(client.post("/settings/rails/stripe/enabled/", {"enabled": "1"}))
        finally:
            connection.close()

    saver, switcher = threading.Thread(target=save_live), threading.Thread(target=switch_on)
    try:
        saver.start()
        assert live_saved.wait(timeout=30)
        switcher.start()
        assert someone_waits(raw, row_locks_only=True)
        switch_waits.set()
        saver.join(timeout=60)
        switcher.join(timeout=60)
    finally:
        switch_waits.set()
        raw.close()
    (response,) = outcome
    account.refresh_from_db()
    assert account.mode == RailMode.LIVE
    assert response.status_code == 403, response.status_code  # type: ignore[attr-defined]
    assert "fresh code" in response.content.decode()  # type: ignore[attr-defined]
    assert not account.enabled
    # The live save's record alone: no switch-on was recorded.
    assert AuditRecord.objects.filter(site=site, kind="rail_change").count() == 1
