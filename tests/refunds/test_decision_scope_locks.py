"""One agent's decisions on different orders run side by side unless a rule or a cap acts on
the agent's sum (issue 18, point 3: decisions on different orders do not queue behind one
another). With the agent-daily-cap rule, the second waits for the first: the sum it reads
must count the first (tests/refunds/test_cross_order_limits.py proves the cap under races).

Decision A is stopped, its transaction open and its scope locks held, just before it writes
the audit chain head (an execute wrapper on A's own connection); decision B of the same agent
on another order, for another customer, runs meanwhile.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from policies.catalog import item_by_id
from policies.services import apply_catalog_item
from sill.accounts.models import Agent
from tests.refunds.conftest import post, refund_intent, signed_body

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _race(site: Any, agent: Agent, make_order: Any, *, wait: float) -> dict[str, Any]:
    bodies = {}
    for name in ("a", "b"):
        order = make_order(
            total="20.00",
            placed_by_agent=agent,
            source_mandate_id=f"mnd_01K6HXAVBQ8G8PYZKN9JXJEP{name.upper()}{name.upper()}",
            email=f"{name}@example.com",  # another customer
        )
        intent = refund_intent(order.source_mandate_id, max_amount=Decimal("20.00"))
        bodies[name] = signed_body(intent, site_id=site.id, agent_id=agent.agent_id)
    a_paused, b_done = threading.Event(), threading.Event()
    answers: dict[str, Any] = {}

    def pause(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if (
            sql.startswith(('UPDATE "audit_auditchainhead"', 'WITH "won" AS (UPDATE'))
            and not a_paused.is_set()
        ):
            a_paused.set()
            answers["b_while_a_open"] = b_done.wait(timeout=wait)
        return execute(sql, params, many, context)

    def run_a() -> None:
        try:
            with connection.execute_wrapper(pause):
                answers["a"] = post(Client(), bodies["a"])
        finally:
            connection.close()

    def run_b() -> None:
        try:
            assert a_paused.wait(timeout=30), "A never reached the chain head"
            answers["b"] = post(Client(), bodies["b"])
        finally:
            b_done.set()
            connection.close()

    # A first decision makes the chain head exist, so A reads it unlocked and pauses there.
    warm = make_order(
        total="5.00",
        placed_by_agent=agent,
        source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPZZ",
        email="z@example.com",
    )
    first = post(Client(), signed_body(refund_intent(warm.source_mandate_id, max_amount=Decimal("5.00")),
                                      site_id=site.id, agent_id=agent.agent_id))  # fmt: skip
    assert first.status_code == 201, first.content
    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for name in ("a", "b"):
        assert answers[name].status_code == 201, answers[name].content
        assert answers[name].json()["decision"] == "approved"
    return answers


def test_without_a_rule_on_the_agents_sum_its_decisions_do_not_queue(
    site, agent, agent_key, make_order, mock_rail
):
    answers = _race(site, agent, make_order, wait=15)
    assert answers["b_while_a_open"] is True, "B waited for A's agent lock"


def test_with_the_agent_daily_cap_rule_the_second_waits_for_the_first(
    site, agent, agent_key, make_order, mock_rail, members
):
    item = item_by_id("agent-daily-cap")
    assert item is not None
    apply_catalog_item(site=site, actor=members["owner"].user, item=item)
    answers = _race(site, agent, make_order, wait=3)
    assert answers["b_while_a_open"] is False, "B read the agent's sum while A was open"
    b_facts = answers["b"].json()
    assert b_facts["decision"] == "approved"
