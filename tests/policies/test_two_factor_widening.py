"""A stolen session (verified, but its code older than five minutes) may tighten a site's rules
but not loosen them: deleting a hold or deny rule, switching one to observe, restoring a
version without it, switching auto-refund on or raising its cap, lengthening or removing the
refund window each need a fresh code, as widening an agent's caps does; the services judge it
under their lock, so no other caller skips it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from policies import catalog
from policies.models import PolicyVersion
from policies.selectors import active_policy_for
from policies.services import (
    apply_catalog_item,
    delete_rule,
    restore_version,
    set_auto_refund,
    set_refund_window,
    set_rule_mode,
)
from sill.accounts import two_factor
from sill.accounts.models import Site
from sill.money import Money
from tests.accounts.two_factor_helpers import (
    VERIFY,
    code_for,
    confirmed_device,
    require_two_factor,
    verified_client,
)

pytestmark = pytest.mark.django_db

WORDS = "Two-factor authentication needed"
STALE = timedelta(minutes=6)


def _refused_for_freshness(response) -> bool:
    body = response.content.decode()
    return response.status_code == 403 and WORDS in body and "fresh code" in body


def _written(site: Site) -> tuple[int, int, int | None]:
    site.refresh_from_db()
    return (
        PolicyVersion.objects.filter(site=site).count(),
        AuditRecord.objects.filter(site=site).count(),
        site.refund_window_days,
    )


def _apply(site: Site, owner, item_id: str, **kwargs) -> None:
    item = catalog.item_by_id(item_id)
    assert item is not None
    apply_catalog_item(site=site, actor=owner, item=item, **kwargs)


def test_loosening_the_rules_asks_for_a_fresh_code_and_tightening_does_not(members, site):
    require_two_factor(site)
    owner = members["owner"]
    device = confirmed_device(owner.user)
    client = verified_client(owner, device)
    _apply(site, owner.user, "r07")  # hold every agent refund (v2)
    _apply(site, owner.user, "conservative", mode="observe")  # hold over $50, observed (v3)
    # With the code just entered (fresh), loosening goes through: auto-refund on (v4), a window.
    form = {"enabled": "on", "cap": "25.00", "currency": "USD"}
    assert client.post("/rules/auto-refund/", form).status_code == 302
    assert client.post("/rules/window/", {"days": "30"}).status_code == 302
    with time_machine.travel(timezone.now() + STALE, tick=False):
        # Tightening, in a session verified long ago: each goes through.
        tighten = [
            ("/rules/templates/large-refund/apply/", {"largeRefundUsd": "250.00"}),
            ("/rules/tpl-conservative/mode/", {"mode": "enforced"}),
            ("/rules/auto-refund/", {"enabled": "on", "cap": "20.00", "currency": "USD"}),
            ("/rules/auto-refund/", {"cap": "20.00", "currency": "USD"}),
            ("/rules/window/", {"days": "14"}),
        ]
        for url, form in tighten:
            response = client.post(url, form)
            assert response.status_code in (302, 303), (url, form, response.content.decode())
        active = active_policy_for(site)
        assert active.rule("tpl-conservative")["mode"] == "enforced"
        assert not active.auto_refund.enabled
        before = _written(site)
        # Loosening: each refused with the code page, nothing written.
        loosen = [
            ("/rules/r07/delete/", {}),
            ("/rules/r07/mode/", {"mode": "observe"}),
            ("/rules/auto-refund/", {"enabled": "on", "cap": "20.00", "currency": "USD"}),
            ("/rules/versions/3/restore/", {}),  # conservative observed, no large-refund
            ("/rules/window/", {"days": "15"}),
            ("/rules/window/", {"days": ""}),
        ]
        for url, form in loosen:
            assert _refused_for_freshness(client.post(url, form)), (url, form)
        assert _written(site) == before
        # htmx gets the refusal as the partial it swaps in, with the way to a code.
        htmx = client.post("/rules/r07/delete/", HTTP_HX_REQUEST="true")
        assert htmx.status_code == 403 and "fresh code" in htmx.content.decode()
        assert VERIFY in htmx.content.decode()
        assert _written(site) == before
        # With a fresh code each goes through.
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        for url, form in [loosen[1], loosen[2], loosen[4], loosen[5], loosen[0]]:
            assert client.post(url, form).status_code in (302, 303), (url, form)
    active = active_policy_for(site)
    assert active.rule("r07") is None
    assert active.auto_refund.enabled and active.auto_refund.cap_minor == 2000
    site.refresh_from_db()
    assert site.refund_window_days is None


def test_raising_the_auto_refund_cap_asks_for_a_fresh_code_and_lowering_does_not(members, site):
    require_two_factor(site)
    owner = members["admin"]
    device = confirmed_device(owner.user)
    client = verified_client(owner, device)
    url = "/rules/auto-refund/"
    form = {"enabled": "on", "cap": "25.00", "currency": "USD"}
    assert client.post(url, form).status_code == 302
    assert active_policy_for(site).auto_refund.cap_minor == 2500  # fresh: went through
    with time_machine.travel(timezone.now() + STALE, tick=False):
        before = _written(site)
        for form in [
            {"enabled": "on", "cap": "25.01", "currency": "USD"},
            {"enabled": "on", "cap": "25.00", "currency": "EUR"},
        ]:
            assert _refused_for_freshness(client.post(url, form)), form
        assert _written(site) == before
        form = {"enabled": "on", "cap": "10.00", "currency": "USD"}
        assert client.post(url, form).status_code == 302
    assert active_policy_for(site).auto_refund.cap_minor == 1000


def test_the_rules_api_asks_for_a_fresh_code_to_delete_a_hold_rule(members, site):
    require_two_factor(site)
    owner = members["owner"]
    device = confirmed_device(owner.user)
    _apply(site, owner.user, "r07")
    client: Client = verified_client(owner, device)
    rules = f"/api/v1/sites/{site.pk}/rules"
    allow = {"id": "small", "when": {"refundAmountUsd": {"lt": 100}}, "then": {"action": "allow"}}
    with time_machine.travel(timezone.now() + STALE, tick=False):
        # Adding a rule never loosens (rules only restrict), nor does deleting an allow rule.
        added = client.post(rules, json.dumps(allow), content_type="application/json")
        assert added.status_code == 201, added.content
        assert client.delete(f"{rules}/small").status_code == 200
        before = _written(site)
        refused = client.delete(f"{rules}/r07")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "two_factor_required"
        assert "fresh code" in refused.json()["error"]["message"]
        assert _written(site) == before
        assert client.post(VERIFY, {"code": code_for(device)}).status_code == 303
        assert client.delete(f"{rules}/r07").status_code == 200
    assert active_policy_for(site).rule("r07") is None


def test_the_services_refuse_a_loosening_whoever_calls_them(members, site):
    """Another caller (a future view, a script) cannot skip the code by not asking for it:
    the services take the session's answer as a required argument and judge it themselves."""
    owner = members["owner"].user
    set_auto_refund(
        site=site,
        actor=owner,
        enabled=True,
        cap=Money(100, "USD"),
        second_factor=two_factor.OPERATOR,
    )  # v2, no rules
    _apply(site, owner, "r07")  # v3
    stale = two_factor.Freshness(
        refused=two_factor.TwoFactorRequired(two_factor.TwoFactorRequired.NOT_FRESH)
    )
    loosen = [
        lambda f: delete_rule(site=site, actor=owner, rule_id="r07", second_factor=f),
        lambda f: set_rule_mode(
            site=site, actor=owner, rule_id="r07", mode="observe", second_factor=f
        ),
        lambda f: set_auto_refund(
            site=site, actor=owner, enabled=True, cap=Money(101, "USD"), second_factor=f
        ),
        lambda f: restore_version(site=site, actor=owner, number=2, second_factor=f),
        lambda f: set_refund_window(site=site, actor=owner, days=None, second_factor=f),
    ]
    set_refund_window(site=site, actor=owner, days=30, second_factor=two_factor.OPERATOR)
    before = _written(site)
    for change in loosen:
        with pytest.raises(two_factor.TwoFactorRequired):
            change(stale)
        with pytest.raises(TypeError, match="second_factor"):
            change(None)
    assert _written(site) == before
    # Tightening with the same stale answer goes through.
    set_auto_refund(
        site=site, actor=owner, enabled=False, cap=Money(100, "USD"), second_factor=stale
    )
    set_refund_window(site=site, actor=owner, days=7, second_factor=stale)
    assert not active_policy_for(site).auto_refund.enabled
