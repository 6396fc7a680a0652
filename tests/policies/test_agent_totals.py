"""The agents' live refunds by quarter-hour, kept by database triggers (migration 0017), read
for the agent's refunds today instead of every refund the agent made today (issue 18).

Every test compares the kept totals with the refunds themselves (the query the fact used to
run on every decision), after writes made the ways Sill makes them: ``save()``, queryset
``update()``, and an agent decision through the API.
"""

from __future__ import annotations

import importlib
import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from policies.facts import (
    agent_live_refunds_since,
    agent_live_totals,
    agent_live_totals_select,
    agent_totals_from,
)
from refunds.models import LIVE_STATUSES, AgentRefundTotal, Refund, RefundStatus
from sill import sql
from sill.accounts.models import Agent, Site
from sill.orders.models import Charge, Order
from tests.policies import test_facts
from tests.policies.test_facts import facts_for

pytestmark = pytest.mark.django_db

buy = test_facts.buy

MIGRATION = importlib.import_module("refunds.migrations.0017_agent_refund_totals")


def _refund(order: Order, agent: Agent, *, status: str, minor: int = 1000, **fields) -> Refund:
    return Refund.objects.create(
        site=order.site, order=order, charge=Charge.objects.get(order=order), origin="agent",
        agent=agent, amount_minor=minor, currency=order.currency, status=status,
        decision="escalated" if status in ("held", "expired") else "approved", **fields,
    )  # fmt: skip


def _quarter_hours_before(when: datetime, count: int) -> list[datetime]:
    start = when.replace(minute=when.minute - when.minute % 15, second=0, microsecond=0)
    return [start - timedelta(minutes=15 * n) for n in range(count)]


def _agrees(site: Site, agent: Agent, *, around: datetime | None = None) -> None:
    """The kept totals and the refunds say the same, from every quarter-hour of a day."""
    around = around or timezone.now()
    for since in _quarter_hours_before(around + timedelta(minutes=15), 100):
        kept = agent_live_totals(agent.pk, since)
        assert kept is not None
        counted = agent_live_refunds_since(site.pk, agent.pk, since)
        assert sorted(kept) == sorted(counted), since
        assert sorted(_carried(agent, since)) == sorted(kept), since


def _carried(agent: Agent, since: datetime) -> list[tuple[str, int]]:
    """The sums as another statement carries them (``agent_live_totals_select``: agent
    intake's order lock on PostgreSQL), selected here on their own."""
    carried = agent_live_totals_select(agent.pk, since)
    assert carried is not None
    if connection.vendor != "postgresql":  # carried on PostgreSQL only (string_agg)
        return agent_live_totals(agent.pk, since) or []
    with sql.cursor() as cursor:
        cursor.execute(f"SELECT {carried.sql}", carried.params)
        return agent_totals_from(cursor.fetchone()[0])


def test_a_refund_counts_exactly_when_its_status_is_live(buy, agent, site: Site) -> None:
    now = timezone.now()
    for status in RefundStatus.values:
        before = dict(agent_live_totals(agent.pk, _quarter_hours_before(now, 1)[0]) or [])
        _refund(buy(), agent, status=status, minor=700)
        after = dict(agent_live_totals(agent.pk, _quarter_hours_before(now, 1)[0]) or [])
        added = after.get("USD", 0) - before.get("USD", 0)
        assert added == (700 if status in LIVE_STATUSES else 0), status
    _agrees(site, agent)


def test_each_change_of_what_a_refund_counts_moves_the_totals(buy, agent, site: Site) -> None:
    other = Agent.objects.create(site=site, agent_id="agent_totals_other", name="Other")
    refund = _refund(buy(), agent, status="processing", minor=1500)
    _agrees(site, agent)
    steps = [
        {"status": "needs_attention"},  # live to live: nothing moves
        {"status": "succeeded"},
        {"status": "failed"},  # reversed after settlement: no longer counted
        {"status": "succeeded"},  # and back (an owner's correction)
        {"amount_minor": 900},
        {"agent": other},
        {"agent": agent},
        {"created_at": timezone.now() - timedelta(hours=5, microseconds=1)},
    ]
    for change in steps:
        for field, value in change.items():
            setattr(refund, field, value)
        refund.save()
        _agrees(site, agent)
        _agrees(site, other)
    held = _refund(buy(), agent, status="held", minor=300)
    Refund.objects.filter(pk=held.pk).update(status="expired")  # the expiry sweep's way
    _agrees(site, agent)
    assert agent_live_totals(agent.pk, _quarter_hours_before(timezone.now(), 1)[0]) == []
    six_hours_ago = _quarter_hours_before(timezone.now() - timedelta(hours=6), 1)[0]
    assert agent_live_totals(agent.pk, six_hours_ago) == [("USD", 900)]


def test_only_changes_of_what_a_refund_counts_write_a_row(buy, agent) -> None:
    refund = _refund(buy(), agent, status="processing")
    rows = AgentRefundTotal.objects.count()
    refund.attempts = 2
    refund.failure_message = "timed out, retrying"
    refund.save()  # every column written, nothing counted differently
    Refund.objects.filter(pk=refund.pk).update(status="succeeded")
    assert AgentRefundTotal.objects.count() == rows


def test_an_agents_refunds_in_one_quarter_hour_are_one_row(buy, agent, site: Site) -> None:
    """However many refunds an agent makes, the day's fact reads at most a row per
    quarter-hour and currency (and one per later change of what a refund counts)."""
    now = timezone.now()
    refunds = [_refund(buy(), agent, status="processing", minor=100) for _ in range(30)]
    Refund.objects.filter(pk__in=[r.pk for r in refunds]).update(created_at=now)
    AgentRefundTotal.objects.all().delete()
    MIGRATION.refill(connection)
    assert AgentRefundTotal.objects.filter(agent=agent).count() == 1
    for refund in refunds[:3]:
        Refund.objects.filter(pk=refund.pk).update(status="failed")
    assert AgentRefundTotal.objects.filter(agent=agent).count() == 1 + 3
    assert agent_live_totals(agent.pk, _quarter_hours_before(now, 1)[0]) == [("USD", 2700)]


def test_the_daily_fact_reads_the_totals(buy, agent, site: Site) -> None:
    """refundAgentTotalTodayUsd from the kept totals: today's live refunds, this one added."""
    now = timezone.now()
    _refund(buy(), agent, status="succeeded", minor=400)
    _refund(buy(), agent, status="failed", minor=800)
    yesterday = _refund(buy(), agent, status="succeeded", minor=1600)
    Refund.objects.filter(pk=yesterday.pk).update(created_at=now - timedelta(days=1, hours=1))
    assert facts_for(buy(), "10.00", now=now)["refundAgentTotalTodayUsd"] == 1000 + 400


def test_a_midnight_off_the_quarter_hours_is_counted_from_the_refunds(
    buy, agent, site: Site
) -> None:
    # New York kept local mean time (UTC-4:56:02) until 1883: its midnights then started no
    # quarter-hour, which the totals cannot split.
    Site.objects.filter(pk=site.pk).update(timezone="America/New_York")
    site.refresh_from_db()
    then = datetime(1850, 6, 2, 15, 0, tzinfo=zoneinfo.ZoneInfo("America/New_York"))
    midnight = then.replace(hour=0)
    assert agent_live_totals(agent.pk, midnight) is None
    assert agent_live_totals_select(agent.pk, midnight) is None  # intake leaves it to the facts
    inside = _refund(buy(), agent, status="succeeded", minor=100)
    Refund.objects.filter(pk=inside.pk).update(created_at=midnight)
    # In midnight's quarter-hour, before it: a kept total would count it, the fact must not.
    before = _refund(buy(), agent, status="succeeded", minor=200)
    Refund.objects.filter(pk=before.pk).update(created_at=midnight - timedelta(seconds=1))
    order = buy()
    order.site = site
    assert facts_for(order, "10.00", now=then)["refundAgentTotalTodayUsd"] == 1000 + 100


def test_refill_counts_what_the_triggers_counted(buy, agent, site: Site) -> None:
    """The migration's backfill, run again over the same refunds, gives the same totals."""
    made = [
        _refund(buy(), agent, status=s, minor=100 * (n + 1))
        for n, s in enumerate(["processing", "held", "succeeded", "failed", "rejected"])
    ]
    made[0].status = "succeeded"
    made[0].save()
    Refund.objects.filter(pk=made[1].pk).update(status="expired")
    Refund.objects.filter(pk=made[2].pk).update(created_at=timezone.now() - timedelta(hours=3))
    kept = _by_period(agent)
    MIGRATION.refill(connection)
    assert set(AgentRefundTotal.objects.values_list("kind", flat=True)) == {"inserted"}
    assert _by_period(agent) == kept
    _agrees(site, agent)


def _by_period(agent: Agent) -> dict[tuple[int, str], int]:
    sums: dict[tuple[int, str], int] = {}
    for period, currency, minor in AgentRefundTotal.objects.filter(agent=agent).values_list(
        "period", "currency", "amount_minor"
    ):
        sums[(period, currency)] = sums.get((period, currency), 0) + minor
    return {key: minor for key, minor in sums.items() if minor}


def test_the_period_of_a_refund_is_its_utc_quarter_hour(buy, agent) -> None:
    refund = _refund(buy(), agent, status="succeeded")
    for when, period in [
        (datetime(2026, 6, 2, 4, 0, tzinfo=UTC), 1_978_192),
        (datetime(2026, 6, 2, 4, 14, 59, 999_999, tzinfo=UTC), 1_978_192),
        (datetime(2026, 6, 2, 3, 59, 59, 999_999, tzinfo=UTC), 1_978_191),
        (datetime(2026, 6, 2, 4, 15, tzinfo=UTC), 1_978_193),
    ]:
        Refund.objects.filter(pk=refund.pk).update(created_at=when)
        latest = AgentRefundTotal.objects.filter(agent=agent, amount_minor__gt=0).latest("id")
        assert latest.period == period == int(when.timestamp()) // 900, when
