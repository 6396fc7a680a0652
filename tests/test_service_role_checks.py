"""The services that change a site's rules, reasons, rails and agents check the acting
member's role themselves (``sill.accounts.access.require_member``), not only their views.

A caller that skipped the view's ``@site_view`` (a task, a script, an API, a new page) cannot
act beyond the member's role: a reviewer, a staff member, an owner of *another* site, a
deactivated admin and no user at all are refused with 403 ``forbidden`` before anything is
read for the change or written (no provider is called, no version, audit record or row changes). An owner's or an
admin's call goes through. Each service is called directly here, with no view in front of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from nacl.signing import SigningKey

from audit.models import AuditRecord
from policies.catalog import TEMPLATES
from policies.models import PolicyVersion
from policies.services import (
    add_rule,
    apply_catalog_item,
    delete_rule,
    restore_version,
    set_auto_refund,
    set_refund_window,
    set_rule_mode,
)
from refunds.models import RefundReason
from refunds.reasons.services import (
    add_reason,
    delete_reason,
    move_reason,
    rename_reason,
    set_reason_active,
)
from sill import errors
from sill.accounts import two_factor
from sill.accounts.models import Agent, AgentKey, AgentToken, Membership, MemberToken, Site
from sill.accounts.services import (
    add_agent_key,
    b64url_encode,
    issue_agent_token,
    issue_member_token,
    record_key_change,
    register_agent_key,
    revoke_agent_key,
    revoke_agent_token,
    revoke_member_token,
    set_agent_active,
    set_agent_refunds,
)
from sill.money import Money
from sill.rails.models import RailAccount
from sill.rails.paypal.connect import configure_paypal
from sill.rails.registry import ensure_mock_rail
from sill.rails.services import configure_stripe, set_rail_enabled
from sill.rails.shopify.connect import configure_shopify
from sill.rails.woocommerce.connect import configure_woocommerce
from tests.conftest import site_owner
from tests.rails import paypal_stub, shopify_stub, woo_stub

pytestmark = pytest.mark.django_db

RULE = "tpl-large-refund"


@dataclass
class World:
    """What a case sets up its object with (as the site's owner) before the check runs."""

    site: Site
    owner: Any
    agent: Agent
    stack: ExitStack


Call = Callable[[Any], object]


def _with_rule(w: World) -> None:
    apply_catalog_item(site=w.site, actor=w.owner, item=TEMPLATES["large-refund"])


def _apply(w: World) -> Call:
    return lambda actor: apply_catalog_item(
        site=w.site, actor=actor, item=TEMPLATES["large-refund"]
    )


def _set_rule_mode(w: World) -> Call:
    _with_rule(w)
    return lambda actor: set_rule_mode(
        site=w.site, actor=actor, rule_id=RULE, mode="observe", second_factor=two_factor.OPERATOR
    )


def _add_rule(w: World) -> Call:
    rule = {"id": "big", "when": {"refundAmountUsd": {"gt": 5000}}, "then": {"action": "deny"}}
    return lambda actor: add_rule(site=w.site, actor=actor, rule=rule)


def _set_refund_window(w: World) -> Call:
    return lambda actor: set_refund_window(
        site=w.site, actor=actor, days=30, second_factor=two_factor.OPERATOR
    )


def _restore_version(w: World) -> Call:
    _with_rule(w)
    first = PolicyVersion.objects.get(site=w.site, active=True).number
    set_rule_mode(
        site=w.site, actor=w.owner, rule_id=RULE, mode="observe", second_factor=two_factor.OPERATOR
    )
    return lambda actor: restore_version(
        site=w.site, actor=actor, number=first, second_factor=two_factor.OPERATOR
    )


def _delete_rule(w: World) -> Call:
    _with_rule(w)
    return lambda actor: delete_rule(
        site=w.site, actor=actor, rule_id=RULE, second_factor=two_factor.OPERATOR
    )


def _set_auto_refund(w: World) -> Call:
    return lambda actor: set_auto_refund(
        site=w.site,
        actor=actor,
        enabled=True,
        cap=Money(2500, "USD"),
        second_factor=two_factor.OPERATOR,
    )


def _reason(w: World, name: str = "Goodwill") -> RefundReason:
    return add_reason(site=w.site, actor=w.owner, name=name)


def _add_reason(w: World) -> Call:
    return lambda actor: add_reason(site=w.site, actor=actor, name="Goodwill")


def _rename_reason(w: World) -> Call:
    reason = _reason(w)
    return lambda actor: rename_reason(reason=reason, actor=actor, name="Good will")


def _move_reason(w: World) -> Call:
    reason, parent = _reason(w), _reason(w, "Shipping")
    return lambda actor: move_reason(reason=reason, actor=actor, parent=parent)


def _set_reason_active(w: World) -> Call:
    reason = _reason(w)
    return lambda actor: set_reason_active(reason=reason, actor=actor, active=False)


def _delete_reason(w: World) -> Call:
    reason = _reason(w)
    return lambda actor: delete_reason(reason=reason, actor=actor)


def _set_rail_enabled(w: World) -> Call:
    ensure_mock_rail(w.site)
    return lambda actor: set_rail_enabled(
        site=w.site, actor=actor, rail="mock", enabled=False, second_factor=two_factor.OPERATOR
    )


def _configure_stripe(w: World) -> Call:
    return lambda actor: configure_stripe(
        site=w.site, actor=actor, secret_key="sk_test_" + "a" * 24, connected_account="",
        mode="test", second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _configure_shopify(w: World) -> Call:
    shop = w.stack.enter_context(shopify_stub.StubServer())
    return lambda actor: configure_shopify(
        site=w.site, actor=actor, shop_domain=shopify_stub.SHOP, access_token=shopify_stub.TOKEN,
        api_base=shop.url, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _configure_paypal(w: World) -> Call:
    paypal = w.stack.enter_context(paypal_stub.StubServer())
    return lambda actor: configure_paypal(
        site=w.site, actor=actor, client_id=paypal_stub.CLIENT_ID,
        client_secret=paypal_stub.CLIENT_SECRET, mode="test", webhook_id=paypal_stub.WEBHOOK_ID,
        api_base=paypal.url, second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _configure_woocommerce(w: World) -> Call:
    store = w.stack.enter_context(woo_stub.StubServer())
    return lambda actor: configure_woocommerce(
        site=w.site, actor=actor, store_url=store.url, consumer_key=woo_stub.CONSUMER_KEY,
        consumer_secret=woo_stub.CONSUMER_SECRET, webhook_secret="",
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _public_key() -> bytes:
    return bytes(SigningKey.generate().verify_key)


def _register_agent_key(w: World) -> Call:
    public = b64url_encode(_public_key())
    return lambda actor: register_agent_key(
        site=w.site, actor=actor, agent_id=w.agent.agent_id, key_id="key-2",
        public_key_b64url=public, valid_from=timezone.now() - timedelta(minutes=1),
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _add_agent_key(w: World) -> Call:
    public = _public_key()
    return lambda actor: add_agent_key(
        site=w.site, agent_id="agent_new", key_id="key-1", public_key=public,
        valid_from=timezone.now() - timedelta(minutes=1), actor=actor,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip


def _record_key_change(w: World) -> Call:
    key = add_agent_key(
        site=w.site, agent_id=w.agent.agent_id, key_id="key-1", public_key=_public_key(),
        valid_from=timezone.now() - timedelta(days=1), actor=w.owner,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    return lambda actor: record_key_change(key=key, action="replace", actor=actor)


def _revoke_agent_key(w: World) -> Call:
    key = add_agent_key(
        site=w.site, agent_id=w.agent.agent_id, key_id="key-1", public_key=_public_key(),
        valid_from=timezone.now() - timedelta(days=1), actor=w.owner,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip
    return lambda actor: revoke_agent_key(key=key, actor=actor)


def _set_agent_active(w: World) -> Call:
    return lambda actor: set_agent_active(
        agent=w.agent, actor=actor, active=False, second_factor=two_factor.OPERATOR
    )


def _set_agent_refunds(w: World) -> Call:
    return lambda actor: set_agent_refunds(
        agent=w.agent,
        actor=actor,
        enabled=True,
        cap_minor=5000,
        daily_cap_minor=20000,
        second_factor=two_factor.OPERATOR,
    )


def _issue_agent_token(w: World) -> Call:
    return lambda actor: issue_agent_token(
        agent=w.agent, actor=actor, second_factor=two_factor.OPERATOR
    )


def _revoke_agent_token(w: World) -> Call:
    text = issue_agent_token(
        agent=w.agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    token = AgentToken.objects.get(prefix=text[:12])
    return lambda actor: revoke_agent_token(token=token, actor=actor)


def _issue_member_token(w: World) -> Call:
    # A staff member's: owners and admins issue it; staff (their own included), reviewers,
    # another site's owner and no user may not (an admin issuing an owner's is tested apart,
    # in tests/accounts/test_member_tokens.py).
    staff = Membership.objects.get(site=w.site, role="staff")
    return lambda actor: issue_member_token(
        membership=staff, actor=actor, second_factor=two_factor.OPERATOR
    )


def _revoke_member_token(w: World) -> Call:
    # The admin's own: the admin may revoke it (their own), the owner too (an admin's); staff,
    # reviewers, another site's owner and no user may not (a member's own is tested apart, in
    # tests/accounts/test_member_tokens.py).
    admin = Membership.objects.get(site=w.site, role="admin")
    text = issue_member_token(
        membership=admin, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    token = MemberToken.objects.get(prefix=text[:12])
    return lambda actor: revoke_member_token(token=token, actor=actor)


SERVICES: dict[str, Callable[[World], Call]] = {
    "apply_catalog_item": _apply,
    "set_rule_mode": _set_rule_mode,
    "add_rule": _add_rule,
    "set_refund_window": _set_refund_window,
    "restore_version": _restore_version,
    "delete_rule": _delete_rule,
    "set_auto_refund": _set_auto_refund,
    "add_reason": _add_reason,
    "rename_reason": _rename_reason,
    "move_reason": _move_reason,
    "set_reason_active": _set_reason_active,
    "delete_reason": _delete_reason,
    "set_rail_enabled": _set_rail_enabled,
    "configure_stripe": _configure_stripe,
    "configure_shopify": _configure_shopify,
    "configure_paypal": _configure_paypal,
    "configure_woocommerce": _configure_woocommerce,
    "add_agent_key": _add_agent_key,
    "record_key_change": _record_key_change,
    "register_agent_key": _register_agent_key,
    "revoke_agent_key": _revoke_agent_key,
    "set_agent_active": _set_agent_active,
    "set_agent_refunds": _set_agent_refunds,
    "issue_agent_token": _issue_agent_token,
    "revoke_agent_token": _revoke_agent_token,
    "issue_member_token": _issue_member_token,
    "revoke_member_token": _revoke_member_token,
}


@pytest.fixture
def world(
    site: Site, members: dict[str, Membership], agent: Agent, settings: Any
) -> Iterator[World]:
    settings.DEBUG = True  # the API address overrides (the loopback providers) need DEBUG
    with ExitStack() as stack:
        yield World(site=site, owner=members["owner"].user, agent=agent, stack=stack)


def _state() -> dict[str, Any]:
    """Everything these services write, every site's: equal before and after a refusal."""
    return {
        "audit": list(AuditRecord.objects.order_by("pk").values_list("pk", flat=True)),
        "versions": list(PolicyVersion.objects.order_by("pk").values_list("pk", "active")),
        "sites": list(Site.objects.order_by("pk").values_list("pk", "refund_window_days")),
        "reasons": list(
            RefundReason.objects.order_by("pk").values_list("pk", "name", "path", "active")
        ),
        "rails": list(RailAccount.objects.order_by("pk").values()),
        "agents": list(Agent.objects.order_by("pk").values()),
        "keys": list(AgentKey.objects.order_by("pk").values()),
        "tokens": list(AgentToken.objects.order_by("pk").values_list("pk", "revoked_at")),
        "member_tokens": list(MemberToken.objects.order_by("pk").values_list("pk", "revoked_at")),
    }


def _actor(persona: str, members: dict[str, Membership]) -> Any:
    return None if persona == "nobody" else members[persona].user


@pytest.mark.parametrize("persona", ["reviewer", "staff", "outsider", "nobody"])
@pytest.mark.parametrize("service", SERVICES)
def test_it_refuses_a_role_that_may_not_and_changes_nothing(
    world: World, members: dict[str, Membership], service: str, persona: str
) -> None:
    call = SERVICES[service](world)
    before = _state()
    with pytest.raises(errors.PermissionDenied) as refused:
        call(_actor(persona, members))
    assert refused.value.code == "forbidden" and refused.value.status == 403
    assert _state() == before


@pytest.mark.parametrize("persona", ["owner", "admin"])
@pytest.mark.parametrize("service", SERVICES)
def test_it_lets_an_owner_or_admin_change_the_site(
    world: World, members: dict[str, Membership], service: str, persona: str
) -> None:
    call = SERVICES[service](world)
    before = _state()
    call(members[persona].user)
    assert _state() != before


@pytest.mark.parametrize("service", SERVICES)
def test_it_refuses_a_deactivated_admin_and_changes_nothing(
    world: World, members: dict[str, Membership], service: str
) -> None:
    admin = members["admin"].user
    admin.is_active = False
    admin.save(update_fields=["is_active"])
    call = SERVICES[service](world)
    before = _state()
    with pytest.raises(errors.PermissionDenied):
        call(admin)
    assert _state() == before


def test_the_operator_issues_an_agent_token_without_a_member(agent: Agent) -> None:
    """``manage.py agents token`` has no user: it says so with ``system=True``, and its
    record names no actor; ``actor=None`` alone is refused like any non-member."""
    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    assert AgentToken.objects.filter(agent=agent, prefix=token[:12]).exists()
    with pytest.raises(errors.PermissionDenied):
        issue_agent_token(agent=agent, actor=None, second_factor=two_factor.OPERATOR)


def test_the_operator_issues_a_member_token_without_a_member(
    site: Site, members: dict[str, Membership]
) -> None:
    """``manage.py members token`` likewise: ``system=True`` and no actor, named by no
    record; ``actor=None`` alone is refused and writes nothing, and a user is no operator."""
    before = _state()
    with pytest.raises(errors.PermissionDenied):
        issue_member_token(
            membership=members["staff"], actor=None, second_factor=two_factor.OPERATOR
        )
    with pytest.raises(ValueError):
        issue_member_token(
            membership=members["staff"],
            actor=members["owner"].user,
            system=True,
            second_factor=two_factor.OPERATOR,
        )
    assert _state() == before
    token = issue_member_token(
        membership=members["staff"], actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    assert MemberToken.objects.filter(membership=members["staff"], prefix=token[:12]).exists()


def test_the_operator_adds_an_agent_key_without_a_member(site: Site, agent: Agent) -> None:
    """``manage.py agents add-key`` and the demo seed say ``system=True`` like the token
    command; ``actor=None`` alone is refused and writes nothing, and a user cannot pass as
    the operator."""
    key = dict(
        site=site, agent_id=agent.agent_id, key_id="key-1", public_key=_public_key(),
        valid_from=timezone.now() - timedelta(days=1),
    )  # fmt: skip
    before = _state()
    with pytest.raises(errors.PermissionDenied):
        add_agent_key(**key, actor=None, second_factor=two_factor.OPERATOR)
    assert _state() == before
    added = add_agent_key(**key, actor=None, system=True, second_factor=two_factor.OPERATOR)
    record_key_change(key=added, action="replace", actor=None, system=True)
    with pytest.raises(ValueError):
        record_key_change(key=added, action="replace", actor=site_owner(site), system=True)
    assert AuditRecord.objects.filter(site=site, kind="key_change").count() == 2
