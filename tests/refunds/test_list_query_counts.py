"""Every list page does bounded work: the same queries with 10 rows as with 1,000, a page of
rows rendered (never all of them), no count or aggregate over the whole table, and audit
lookups by the indexed subject columns, never a search of the payload (issue 18, point 6).

Counts and SQL shapes, not times: ``bench/lists.py`` times the same pages on the same data.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from refunds.models import RefundStatus
from sill.accounts.models import Agent, Membership, Site
from tests.refunds.list_rows import (
    fill_page,
    make_audit_records,
    make_open_items,
    make_orders,
    make_refunds,
)

pytestmark = pytest.mark.django_db

FEW, MANY = 10, 1000
# How many rows each page may show at most (its page size), and how to count them in the HTML.
ROW_MARKS = {
    "/held/": (25, r'id="held-row-'),
    "/orders/": (25, r'<td data-label="Order"><a href="/orders/'),
    "/refunds/": (25, r"data-refund-id="),
    "/activity/": (50, r'<td class="num">\d+</td>\s*<td>'),
    "/reconcile/": (25, r'<article class="recon-item'),
}


def _get(client: Client, path: str, **params: Any) -> tuple[str, list[str]]:
    client.get(path, params)  # warm: the session, the site's keys, caches
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, params)
    assert response.status_code == 200, response.status_code
    return response.content.decode(), [q["sql"] for q in captured.captured_queries]


@pytest.fixture
def owner(client_for: Callable[[str], Client]) -> Client:
    return client_for("owner")


@pytest.mark.parametrize("path", list(ROW_MARKS))
def test_it_pages_1000_rows_in_the_queries_of_10(
    path: str, owner: Client, site: Site, agent: Agent, members: dict[str, Membership]
):
    fill_page(path, site, agent, FEW)
    _, few = _get(owner, path)
    fill_page(path, site, agent, MANY - FEW)
    body, many = _get(owner, path)
    assert len(many) == len(few), "\n\n".join(many)
    page_size, mark = ROW_MARKS[path]
    shown = len(re.findall(mark, body))
    assert 0 < shown <= page_size, shown


@pytest.mark.parametrize("path", list(ROW_MARKS))
def test_it_counts_and_aggregates_only_a_bounded_number_of_rows(
    path: str, owner: Client, site: Site, agent: Agent, members: dict[str, Membership]
):
    """A count for the pager (or a picker's ``DISTINCT``) stops at a cap (``LIMIT``); nothing
    groups the whole table."""
    fill_page(path, site, agent, 30)
    _, queries = _get(owner, path)
    for sql in queries:
        assert "GROUP BY" not in sql.upper(), sql
        if re.search(r"\bCOUNT\(|\bDISTINCT\b", sql, re.IGNORECASE):
            assert re.search(r"\bLIMIT\b", sql, re.IGNORECASE), f"an unbounded count: {sql}"


def test_the_later_pages_keep_the_filters_and_show_the_older_rows(
    owner: Client, site: Site, agent: Agent
):
    fill_page("/refunds/", site, agent, 150)  # 50 succeeded: two pages of 25
    first = owner.get("/refunds/", {"status": "succeeded"}).content.decode()
    assert "status=succeeded&amp;page=2" in first
    second = owner.get("/refunds/", {"status": "succeeded", "page": 2}).content.decode()
    on_first = set(re.findall(r'data-refund-id="([^"]+)"', first))
    on_second = set(re.findall(r'data-refund-id="([^"]+)"', second))
    assert len(on_first) == len(on_second) == 25
    assert on_first.isdisjoint(on_second)


def test_the_reconcile_inbox_pages_its_open_differences(owner: Client, site: Site, agent: Agent):
    orders = make_orders(site, 30)
    make_open_items(site, orders)
    first = owner.get("/reconcile/").content.decode()
    second = owner.get("/reconcile/", {"page": 2}).content.decode()
    on_first = set(re.findall(r'id="item-(\d+)"', first))
    on_second = set(re.findall(r'id="item-(\d+)"', second))
    assert len(on_first) == 25 and len(on_second) == 5
    assert on_first.isdisjoint(on_second)
    assert "page=2" in first and '<span class="count">30</span>' in first


# Not "page": pytest-playwright takes a test with that argument for a browser test and moves
# it, and the tests around it, among the browser tests (whose flushes empty the tables).
@pytest.mark.parametrize("where", ["held", "refund"])
def test_a_refunds_records_are_found_by_their_indexed_subject_not_a_search(
    where: str, owner: Client, site: Site, agent: Agent
):
    orders = make_orders(site, 3)
    refunds = make_refunds(site, orders, statuses=(RefundStatus.HELD,), agent=agent)
    make_audit_records(site, refunds)
    path = f"/held/{refunds[1].pk}/" if where == "held" else f"/refunds/{refunds[1].pk}/"
    _, queries = _get(owner, path)
    audit = [sql for sql in queries if "audit_auditrecord" in sql]
    assert audit, "the page reads the refund's records"
    for sql in audit:
        assert " LIKE " not in sql.upper(), sql
    assert any('"subject_refund_id" =' in sql for sql in audit), audit


def test_a_count_stops_at_its_cap_and_says_there_is_more(site: Site):
    from sill.orders.models import Order
    from sill.paging import BoundedPaginator

    make_orders(site, 30)
    orders = Order.objects.filter(site=site).order_by("-created_at", "-id")
    capped = BoundedPaginator(orders, 10, cap=20)
    assert (capped.count, capped.more, capped.num_pages) == (20, True, 2)
    assert len(capped.get_page(2).object_list) == 10
    whole = BoundedPaginator(orders, 10, cap=30)
    assert (whole.count, whole.more, whole.num_pages) == (30, False, 3)
