"""The refund method is switched on per agent (off for a new agent, on for the demo agent),
and an agent's caps per refund and per day are checked before the policy."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from refunds.demo import DEMO_AGENT_ID, load_demo
from refunds.models import Refund
from sill.accounts.models import Agent
from sill.orders.models import Charge
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db


def test_an_agent_whose_refund_method_is_off_is_refused_before_anything_moves(
    client, sign, original, agent
):
    agent.refund_enabled = False
    agent.save()
    answer = post(client, sign(refund_intent(ORIGINAL)))
    assert answer.status_code == 201
    body = answer.json()
    assert (body["decision"], body["reason"]) == ("rejected", "method_not_allowed")
    refund = Refund.objects.get()
    assert refund.order_id is None and refund.amount_minor == 0  # nothing was looked up
    assert refund.charge_id is None


def test_a_new_agent_starts_with_it_off_and_the_demo_agent_with_it_on(site, db):
    assert Agent.objects.create(site=site, agent_id="agent_new", name="New").refund_enabled is False
    load_demo()
    assert Agent.objects.get(agent_id=DEMO_AGENT_ID).refund_enabled is True


def test_a_refund_over_the_agents_cap_is_refused(client, sign, original, agent):
    agent.refund_cap_minor = 5000
    agent.save()
    body = post(client, sign(refund_intent(ORIGINAL))).json()
    assert (body["decision"], body["reason"]) == ("rejected", "agent_cap_exceeded")
    # Asked for less, it fits.
    body = post(client, sign(refund_intent(ORIGINAL, max_amount=50.00))).json()
    assert body["decision"] == "approved" and body["amount"] == "50.00"


def test_the_daily_cap_counts_the_agents_refunds_since_midnight(
    client, sign, agent, make_order, mock_rail
):
    agent.daily_refund_cap_minor = 10000
    agent.save()
    first = make_order(total="60.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    second = make_order(
        total="60.00", placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTB"
    )
    assert (
        post(client, sign(refund_intent(ORIGINAL, max_amount=60.00))).json()["decision"]
        == "approved"
    )
    body = post(client, sign(refund_intent(second.source_mandate_id, max_amount=60.00))).json()
    assert body["reason"] == "agent_cap_exceeded"
    # Yesterday's refunds do not count.
    Refund.objects.filter(order=first).update(created_at=timezone.now() - timedelta(days=2))
    body = post(client, sign(refund_intent(second.source_mandate_id, max_amount=60.00))).json()
    assert body["decision"] == "approved"


def test_the_daily_cap_reads_the_agents_sum_in_the_sites_currency_with_the_order_lock(
    client, sign, agent, site, make_order, mock_rail
):
    """The cap counts what the policy's facts count (the kept quarter-hour totals), in the
    site's currency only; on PostgreSQL the sum comes with the order's lock, so a capped
    agent's decision costs no query more than an uncapped one's."""
    agent.daily_refund_cap_minor = 10000
    agent.save()
    for total, currency in (("50.00", "USD"), ("80.00", "EUR")):
        earlier = make_order(total=total, currency=currency)
        Refund.objects.create(
            site=site, order=earlier, charge=Charge.objects.get(order=earlier), origin="agent",
            agent=agent, amount_minor=earlier.total_minor, currency=currency,
            decision="approved", status="succeeded",
        )  # fmt: skip
    make_order(total="60.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    statements: list[str] = []

    def record(execute, sql, params, many, context):  # every statement, as sent
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        body = post(client, sign(refund_intent(ORIGINAL, max_amount=60.00))).json()
    assert body["reason"] == "agent_cap_exceeded"  # $50 + $60 over $100; the EUR do not count
    body = post(client, sign(refund_intent(ORIGINAL, max_amount=50.00))).json()
    assert body["decision"] == "approved"  # $50 + $50 fits
    assert not [s for s in statements if 'SUM("refunds_refund"."amount_minor")' in s]
    apart = [s for s in statements if s.lstrip().startswith("SELECT t.currency")]
    assert len(apart) == (0 if connection.vendor == "postgresql" else 1), "\n".join(statements)


def test_settings_switch_the_method_and_set_caps_audited(client_for, site, agent, members):
    from audit.models import AuditRecord

    url = f"/settings/agents/{agent.pk}/refunds/"
    answer = client_for("admin").post(
        url, {"refund_enabled": "on", "cap": "50.00", "daily_cap": "200"}
    )
    assert answer.status_code in (302, 303)
    agent.refresh_from_db()
    assert (agent.refund_enabled, agent.refund_cap_minor, agent.daily_refund_cap_minor) == (
        True,
        5000,
        20000,
    )
    record = AuditRecord.objects.filter(site=site, kind="agent_change").last()
    assert (
        '"action":"set_refunds"' in record.payload and '"refund_cap_minor":5000' in record.payload
    )

    client_for("admin").post(url, {"cap": "", "daily_cap": ""})  # switched off, caps removed
    agent.refresh_from_db()
    assert (agent.refund_enabled, agent.refund_cap_minor, agent.daily_refund_cap_minor) == (
        False,
        None,
        None,
    )


@pytest.mark.parametrize("cap", ["-5", "abc", "1.001"])
def test_a_bad_cap_changes_nothing(client_for, agent, cap):
    before = (agent.refund_enabled, agent.refund_cap_minor)
    client_for("owner").post(
        f"/settings/agents/{agent.pk}/refunds/", {"refund_enabled": "on", "cap": cap}
    )
    agent.refresh_from_db()
    assert (agent.refund_enabled, agent.refund_cap_minor) == before


def test_roles_and_sites_for_the_switch(client_for, agent):
    url = f"/settings/agents/{agent.pk}/refunds/"
    assert client_for("reviewer").post(url, {"refund_enabled": "on"}).status_code == 403
    assert client_for("outsider").post(url, {"refund_enabled": "on"}).status_code == 404


def test_the_agents_page_shows_the_switch_and_caps(client_for, agent):
    agent.refund_cap_minor = 2500
    agent.save()
    page = client_for("owner").get("/settings/agents/").content.decode()
    assert f'action="/settings/agents/{agent.pk}/refunds/"' in page
    assert 'name="refund_enabled" checked' in page and 'value="25.00"' in page
