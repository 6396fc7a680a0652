"""A deadlock in the decision transaction is retried, and answered 503 ``busy`` past the bound.

The deadlocks are real: another connection takes the locks in the wrong order (a row the
decision needs, then the agent's or customer's scope lock the decision already holds), so
PostgreSQL's deadlock detector aborts one of the two. The decision starts waiting first, so
its ``deadlock_timeout`` (1 s) runs out first and it is the one aborted; the other
connection's timeout is raised where the server allows it, to keep that certain.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.models import Model
from django.test import Client

from refunds.locks import RETRIES, scope_keys
from refunds.models import Mandate, Refund
from refunds.review.decisions import approve_refund
from refunds.staff.services import create_staff_refund
from sill.money import parse_major
from sill.orders.models import Customer, Order
from sill.rails.models import MockLedgerEntry
from tests.openapi import check_answer, served_schema
from tests.refunds.conftest import hold_refund, post, refund_intent
from tests.threads import PIDS_HERE

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"
WAITING = f"""
    SELECT 1 FROM pg_locks held JOIN pg_locks waiting ON waiting.pid = held.pid
    WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 2
      AND held.classid::bigint = %s AND held.objid::bigint = %s
      AND NOT waiting.granted AND held.pid <> pg_backend_pid()
      AND held.pid IN {PIDS_HERE}
"""


class LockInversion:
    """A transaction holding ``row``'s lock that, ``rounds`` times, asks for ``scope`` while a
    decision holds ``scope`` and waits for ``row``: a deadlock each time. Then it commits."""

    def __init__(self, row: Model, scope: tuple[int, int], *, rounds: int) -> None:
        self.scope, self.rounds, self.done = scope, rounds, 0
        self.raw = connection.get_new_connection(connection.get_connection_params())
        self.raw.autocommit = True
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            self.raw.execute("SET deadlock_timeout = '30s'")  # superusers only
        self.raw.execute("BEGIN")
        table = row._meta.db_table
        self.raw.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR UPDATE', [row.pk])
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _decision_waits(self) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.raw.execute(WAITING, list(self.scope)).fetchone():
                return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        try:
            for _ in range(self.rounds):
                if not self._decision_waits():
                    break
                # Blocks until PostgreSQL aborts the decision as the deadlock's victim.
                self.raw.execute("SELECT pg_advisory_lock(%s, %s)", list(self.scope))
                self.raw.execute("SELECT pg_advisory_unlock(%s, %s)", list(self.scope))
                self.done += 1
            self.raw.execute("COMMIT")
        finally:
            self.raw.close()

    def __enter__(self) -> LockInversion:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join(timeout=60)


@pytest.fixture
def customer(site) -> Customer:
    return Customer.objects.create(site=site, email="regular@example.com")


def _order_of(customer: Customer, order: Order) -> Order:
    Order.objects.filter(pk=order.pk).update(customer=customer)
    order.refresh_from_db()
    return order


def _with_daily_cap(agent: Any) -> None:
    # Agent intake takes the agent's scope lock only when something acts on the agent's sum
    # (refunds.locks.decision_scope): a daily cap does.
    agent.daily_refund_cap_minor = 1_000_000_00
    agent.save(update_fields=["daily_refund_cap_minor"])


def _retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


def test_it_retries_a_mandate_whose_transaction_was_a_deadlock_victim(
    agent, sign, make_order, mock_rail, caplog
):
    order = make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    _with_daily_cap(agent)
    (scope,) = scope_keys(agent_id=agent.pk, customer_id=None)
    body = sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00")))

    caplog.set_level(logging.WARNING, logger="refunds.locks")
    with LockInversion(order, scope, rounds=1) as other:
        response = post(Client(), body)

    assert other.done == 1
    assert len(_retries(caplog)) == 1, caplog.text
    assert response.status_code == 201, response.content
    assert response.json()["decision"] == "approved"
    assert Mandate.objects.count() == 1 and Refund.objects.count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_it_retries_a_staff_refund_whose_transaction_was_a_deadlock_victim(
    site, members, make_order, mock_rail, customer, leaf, caplog
):
    order = _order_of(customer, make_order(total="89.00"))
    (scope,) = scope_keys(agent_id=None, customer_id=customer.pk)

    caplog.set_level(logging.WARNING, logger="refunds.locks")
    with LockInversion(order, scope, rounds=1) as other:
        refund = create_staff_refund(
            site=site,
            order=order,
            actor=members["staff"].user,
            kind="amount",
            amount=parse_major("10.00", "USD"),
            reason=leaf,
        )

    assert other.done == 1
    assert len(_retries(caplog)) == 1, caplog.text
    assert refund.decision == "approved"
    assert Refund.objects.count() == 1


def test_it_retries_a_held_approval_whose_transaction_was_a_deadlock_victim(
    members, make_order, mock_rail, customer, caplog
):
    order = _order_of(customer, make_order(total="89.00"))
    held = hold_refund(order=order, requested_by=members["staff"].user)
    (scope,) = scope_keys(agent_id=None, customer_id=customer.pk)

    caplog.set_level(logging.WARNING, logger="refunds.locks")
    # The approval locks the refund row right after the scope: hold that one.
    with LockInversion(held, scope, rounds=1) as other:
        approved = approve_refund(refund=held, actor=members["owner"].user)

    assert other.done == 1
    assert len(_retries(caplog)) == 1, caplog.text
    approved.refresh_from_db()
    assert (approved.decision, approved.status) == ("approved", "succeeded")


def test_it_answers_503_busy_after_the_retries_run_out(
    client_for, make_order, mock_rail, customer, leaf, caplog
):
    order = _order_of(customer, make_order(total="89.00"))
    (scope,) = scope_keys(agent_id=None, customer_id=customer.pk)
    client = client_for("staff")

    caplog.set_level(logging.WARNING, logger="refunds.locks")
    with LockInversion(order, scope, rounds=RETRIES + 1) as other:
        response = client.post(
            f"/api/order/{order.id}/refund",
            data={"amount": "10.00", "reasonId": leaf.pk},
            content_type="application/json",
        )

    assert other.done == RETRIES + 1
    assert len(_retries(caplog)) == RETRIES, caplog.text
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("busy", None)
    assert "nothing was refunded" in error["message"] and "Retry after" in error["message"]
    assert Refund.objects.count() == 0
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0


def test_it_answers_a_mandate_503_busy_after_the_retries_run_out(
    agent, sign, make_order, mock_rail, caplog, settings
):
    settings.SILL_PUBLIC_SCHEMA = True
    schema = served_schema()
    order = make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    _with_daily_cap(agent)
    (scope,) = scope_keys(agent_id=agent.pk, customer_id=None)
    body = sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00")))

    caplog.set_level(logging.WARNING, logger="refunds.locks")
    with LockInversion(order, scope, rounds=RETRIES + 1) as other:
        response = post(Client(), body)

    assert other.done == RETRIES + 1
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "busy"
    check_answer(schema, "/api/v1/mandates", "POST", response)  # 503, in the Error shape
    # Nothing was kept: the same mandate, sent again, is decided as if new.
    assert Mandate.objects.count() == 0 and Refund.objects.count() == 0
    again = post(Client(), body)
    assert again.status_code == 201 and again.json()["decision"] == "approved"
