"""The time windows of the facts Sill counts from its own records (hand-written SQL)."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from policies.facts import agent_day_start
from refunds.models import Refund
from sill.accounts.models import Site
from sill.orders.models import Charge, Customer, Order
from tests.policies import test_facts
from tests.policies.test_facts import facts_for

pytestmark = pytest.mark.django_db

# The fixtures of test_facts: an agent's order (maybe a customer's) on the mock rail.
buy = test_facts.buy
customer = test_facts.customer

NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def refund_at(
    order: Order, when: datetime, *, agent, minor: int = 1000, status: str = "succeeded"
) -> Refund:
    refund = Refund.objects.create(
        site=order.site, order=order, charge=Charge.objects.get(order=order), origin="agent",
        agent=agent, amount_minor=minor, currency="USD", decision="approved", status=status,
    )  # fmt: skip
    Refund.objects.filter(pk=refund.pk).update(created_at=when)
    return refund


def test_it_counts_the_agents_refunds_since_the_sites_local_midnight(buy, agent, site: Site):
    Site.objects.filter(pk=site.pk).update(timezone="America/New_York")
    site.refresh_from_db()
    now = datetime(2026, 6, 2, 3, 30, tzinfo=NEW_YORK)  # 07:30 UTC
    midnight = datetime(2026, 6, 2, tzinfo=NEW_YORK)  # 04:00 UTC, not UTC midnight
    refund_at(buy(), midnight, agent=agent, minor=100)  # at midnight: counted
    refund_at(buy(), midnight + timedelta(microseconds=1), agent=agent, minor=200)
    refund_at(buy(), midnight - timedelta(microseconds=1), agent=agent, minor=400)  # yesterday
    order = buy()
    order.site = site
    assert facts_for(order, "10.00", now=now)["refundAgentTotalTodayUsd"] == 1000 + 100 + 200


def test_the_day_starts_at_the_first_midnight_when_the_clocks_go_back_to_repeat_it(
    buy, agent, site: Site
):
    # The Azores go back from 01:00 (UTC+0) to 00:00 (UTC-1) on 27 October 2024: 00:00-00:59
    # happens twice, and the day began at the first midnight, 00:00 UTC.
    Site.objects.filter(pk=site.pk).update(timezone="Atlantic/Azores")
    site.refresh_from_db()
    utc = zoneinfo.ZoneInfo("UTC")
    first_midnight = datetime(2024, 10, 27, 0, 0, tzinfo=utc)
    refund_at(buy(), first_midnight + timedelta(minutes=30), agent=agent, minor=100)  # 00:30
    refund_at(buy(), first_midnight - timedelta(microseconds=1), agent=agent, minor=400)
    now = datetime(2024, 10, 27, 1, 30, tzinfo=utc)  # 00:30 again, local time
    # Compared as instants: an ambiguous local time never equals another zone's (PEP 495).
    assert agent_day_start(site, now).timestamp() == first_midnight.timestamp()
    order = buy()
    order.site = site
    assert facts_for(order, "10.00", now=now)["refundAgentTotalTodayUsd"] == 1000 + 100


def test_it_counts_the_customers_live_refunds_of_the_last_30_days(
    buy,
    agent,
    customer: Customer,
):
    now = timezone.now()
    since = now - timedelta(days=30)
    refund_at(buy(customer=customer), since, agent=agent)  # on the boundary: counted
    refund_at(buy(customer=customer), since - timedelta(microseconds=1), agent=agent)  # older
    refund_at(buy(customer=customer), now, agent=agent, status="failed")
    refund_at(buy(), now, agent=agent)  # a guest's order: another customer
    assert facts_for(buy(customer=customer), "10.00", now=now)["refundCustomerRefunds30d"] == 1
