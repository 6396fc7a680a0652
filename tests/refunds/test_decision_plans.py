"""The hand-written statements of an agent decision settle on PostgreSQL's generic plan, so
a decision is bound and run, not planned again (issue 18).

``sill.sql`` prepares its statements; PostgreSQL plans a prepared statement afresh for its
first five runs, then keeps the generic plan unless it costs more than the fresh ones did.
A statement whose generic plan cannot use the index the fresh plans use is planned on every
run, for good: the prefetch of the original charge was (its order is found through the
partial unique index on ``(site_id, source_mandate_id) WHERE source_mandate_id <> ''``, which a
generic plan can use only when the statement itself says the id is not empty). That was
about 0.8 ms of database CPU per decision, a fifth of the database server's share in
``bench/agent_http.py``.

The site gets a few thousand paid orders its agent placed, and their statistics, first: as on
a real site, a generic plan that scans the site's orders then costs more than the lookup.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus
from sill.rails.base import RailName
from tests.refunds.conftest import post, refund_intent

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

RUNS = 9  # PostgreSQL's five fresh plans, then four that should be generic
EARLIER_ORDERS = 3000


def _plans() -> dict[str, tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return {statement: (generic, custom) for statement, generic, custom in cursor.fetchall()}


def test_every_statement_a_decision_repeats_runs_on_its_generic_plan(
    client, sign, make_order, agent, mock_rail, django_capture_on_commit_callbacks
):
    earlier = Order.objects.bulk_create(
        Order(
            site=agent.site, number=f"P{n}", source_mandate_id=f"mnd_bulk_{n:05d}",
            currency="USD", total_minor=1000, status=OrderStatus.PAID, placed_by_agent=agent,
        )
        for n in range(EARLIER_ORDERS)
    )  # fmt: skip
    Charge.objects.bulk_create(
        Charge(
            order=order, rail=RailName.MOCK, amount_minor=1000, currency="USD",
            status=ChargeStatus.SUCCEEDED, provider_charge_id=f"mock_ch_bulk_{n:05d}",
        )
        for n, order in enumerate(earlier)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE orders_order, orders_charge")
    before = _plans()
    for n in range(RUNS):
        mandate_id = f"mnd_01K6HXAVBQ8G8PYZKN9JXJE{n:03d}"
        make_order(total="10.00", placed_by_agent=agent, source_mandate_id=mandate_id)
        with django_capture_on_commit_callbacks():
            answer = post(client, sign(refund_intent(mandate_id, max_amount=Decimal("10.00"))))
        assert answer.status_code == 201, answer.content
        assert answer.json()["decision"] == "approved"
    after = _plans()
    replanned = {}
    for statement, (generic, custom) in after.items():
        was_generic, was_custom = before.get(statement, (0, 0))
        runs = generic + custom - was_generic - was_custom
        if runs == RUNS and custom - was_custom > 5:
            replanned[statement[:160]] = custom - was_custom
    # Statements that every decision runs (RUNS times here) are known: some must be seen.
    assert sum(1 for s, (g, c) in after.items() if g + c - sum(before.get(s, (0, 0))) == RUNS) >= 5
    assert replanned == {}
