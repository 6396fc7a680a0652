"""Limits that sum over several orders hold under simultaneous requests (PostgreSQL).

An agent's daily cap and a customer's refunds per month are facts read over many orders,
while each request locks only its own order. Each thread below has its own connection, so
these are real concurrent decisions: the agent/customer scope lock (``refunds.locks``) makes
the ones that share an agent or a customer wait for each other.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client

from policies import catalog
from policies.services import apply_catalog_item
from refunds.locks import scope_keys
from refunds.models import Refund
from refunds.review.decisions import approve_refund
from refunds.staff.services import create_staff_refund
from sill.ids import new_ulid
from sill.money import parse_major
from sill.orders.models import Customer, Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import hold_refund, post, refund_intent
from tests.threads import PIDS_HERE, run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _apply(site, owner, template: str, **kwargs) -> None:
    item = catalog.item_by_id(template)
    assert item is not None
    apply_catalog_item(site=site, actor=owner, item=item, **kwargs)


def _for_customer(order: Order, customer: Customer | None) -> Order:
    Order.objects.filter(pk=order.pk).update(customer=customer)
    order.refresh_from_db()
    return order


@pytest.fixture
def regular(site) -> Customer:
    return Customer.objects.create(site=site, email="regular@example.com", name="Regular")


def test_it_approves_at_most_one_of_ten_simultaneous_40_dollar_mandates_under_a_50_cap(
    site, members, agent, sign, make_order, mock_rail
):
    _apply(site, members["owner"].user, "agent-daily-cap", params={"dailyCapUsd": "50.00"})
    originals = [f"mnd_{new_ulid()}" for _ in range(10)]
    for i, original in enumerate(originals):
        # One customer per order: only the agent is shared, so only its lock can serialise.
        buyer = Customer.objects.create(site=site, email=f"buyer{i}@example.com")
        _for_customer(
            make_order(total="89.00", placed_by_agent=agent, source_mandate_id=original), buyer
        )
    bodies = [sign(refund_intent(o, max_amount=Decimal("40.00"))) for o in originals]

    responses = run_concurrently(10, lambda i: post(Client(), bodies[i]))

    assert all(not isinstance(r, Exception) for r in responses), responses
    answers = [r.json() for r in responses]
    assert all(r.status_code == 201 for r in responses), answers
    decisions = sorted((a["decision"], a["reason"]) for a in answers)
    assert decisions == [("approved", None)] + [("rejected", "policy_denied")] * 9, decisions
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    denied = Refund.objects.filter(outcome_code="policy_denied")
    # Every denial saw the approved $40 already counted: $40 + $40 > $50.
    assert {r.facts["refundAgentTotalTodayUsd"] for r in denied} == {8000}


def test_it_approves_one_of_six_simultaneous_staff_refunds_for_one_customer(
    site, members, make_order, mock_rail, leaf, regular
):
    _apply(site, members["owner"].user, "customer-monthly")  # one refund per customer a month
    orders = [_for_customer(make_order(total="30.00"), regular) for _ in range(6)]
    actor = members["staff"].user

    def work(i: int) -> Refund:
        return create_staff_refund(
            site=site,
            order=orders[i],
            actor=actor,
            kind="amount",
            amount=parse_major("10.00", "USD"),
            reason=leaf,
        )

    results = run_concurrently(6, work)

    assert all(isinstance(r, Refund) for r in results), results
    outcomes = sorted((r.decision, r.outcome_code) for r in results)
    assert outcomes == [("approved", "")] + [("rejected", "policy_denied")] * 5, outcomes
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    denied = Refund.objects.filter(outcome_code="policy_denied")
    assert {r.facts["refundCustomerRefunds30d"] for r in denied} == {1}


def _held_by(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_locks WHERE pid <> %s AND NOT granted AND locktype = 'advisory' "
            f"AND pid IN {PIDS_HERE}",
            [pid],
        )
        return cursor.fetchone() is not None


def test_it_makes_a_held_approval_wait_for_the_customers_scope_lock(
    site, members, make_order, mock_rail, regular
):
    order = _for_customer(make_order(total="30.00"), regular)
    refund = hold_refund(order=order, requested_by=members["staff"].user)
    (namespace, key), *_ = scope_keys(agent_id=None, customer_id=order.customer_id)
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcome: list[object] = []

    def approve() -> None:
        try:
            outcome.append(approve_refund(refund=refund, actor=members["owner"].user))
        except Exception as exc:  # examined below
            outcome.append(exc)
        finally:
            connection.close()

    try:
        pid = raw.execute("SELECT pg_backend_pid()").fetchone()[0]
        raw.execute("SELECT pg_advisory_lock(%s, %s)", [namespace, key])
        thread = threading.Thread(target=approve)
        thread.start()
        deadline = time.monotonic() + 10
        while not _held_by(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        waiting = _held_by(pid)
        assert not outcome, outcome  # the approval waits for the customer's lock
        raw.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])
        thread.join(timeout=30)
    finally:
        raw.close()
    assert waiting
    assert len(outcome) == 1 and isinstance(outcome[0], Refund), outcome
    assert outcome[0].decision == "approved"
