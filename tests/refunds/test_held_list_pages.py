"""The held list is paginated (issue 18: bounded work however many refunds wait) and keeps
its filters across pages; the work per page does not grow with the number of holds."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from refunds.review.views import HELD_PAGE_SIZE
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


def hold(make_order, agent, n: int) -> None:
    for _ in range(n):
        hold_refund(order=make_order(total="10.00"), agent=agent)


def test_it_shows_one_page_at_a_time_and_links_the_next(client_for, make_order, agent, mock_rail):
    hold(make_order, agent, HELD_PAGE_SIZE + 3)
    client = client_for("owner")
    first = client.get("/held/").content.decode()
    assert first.count('class="held-row"') == HELD_PAGE_SIZE
    assert f"1\u2013{HELD_PAGE_SIZE} of {HELD_PAGE_SIZE + 3}" in first and "page=2" in first
    second = client.get("/held/", {"page": 2}).content.decode()
    assert second.count('class="held-row"') == 3


def test_the_pager_keeps_the_filters(client_for, make_order, agent, mock_rail):
    hold(make_order, agent, HELD_PAGE_SIZE + 1)
    body = client_for("owner").get("/held/", {"agent": agent.agent_id}).content.decode()
    assert f"agent={agent.agent_id}&amp;page=2" in body


def test_a_page_costs_the_same_queries_for_few_and_many_holds(
    client_for, make_order, agent, mock_rail
):
    client = client_for("owner")
    hold(make_order, agent, 3)
    with CaptureQueriesContext(connection) as few:
        client.get("/held/")
    hold(make_order, agent, HELD_PAGE_SIZE + 10)
    with CaptureQueriesContext(connection) as many:
        client.get("/held/")
    # The pager's COUNT is the one query a longer list adds.
    assert len(many.captured_queries) <= len(few.captured_queries) + 1


@pytest.mark.parametrize("field", ["amount_min", "amount_max"])
@pytest.mark.parametrize("value", ["1e999999", "9e999998", "1e40"])
def test_an_amount_filter_past_any_amount_is_not_a_500(client_for, held, field, value):
    """``1e999999`` is a finite decimal, and times 100 it overflowed the decimal context: a
    500 for the page and its htmx partial. Past any amount, a minimum matches nothing and a
    maximum everything."""
    client = client_for("owner")
    page = client.get("/held/", {field: value})
    partial = client.get(
        "/held/", {field: value}, headers={"HX-Request": "true", "HX-Target": "held-results"}
    )
    assert page.status_code == 200 and partial.status_code == 200
    shown = held.id in page.content.decode()
    assert shown is (field == "amount_max")
