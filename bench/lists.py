"""The list pages at 1,000 rows against the same pages at 10, measured in the same run (issue 18,
point 6: at most 5x the time, and the same queries).

For each of ``/held/``, ``/orders/``, ``/refunds/``, ``/activity/`` and ``/reconcile/``, on a
fresh site whose owner is logged in: fill 10 rows of what the page lists
(``tests/refunds/list_rows.fill_page``, the data the query-count tests use), time the page
through Django's test client (median of the rounds, after warming), fill 990 more and time it
again. Two figures per page: the time at 1,000 over the time at 10 (goal <= 5), and the
queries at 1,000 over the queries at 10 (goal <= 1). Each page's rows are rolled back after.

Run: `make bench` or `.venv/bin/python bench/lists.py [--rounds R]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import figure, finish
from _setup import ROOT, django_setup

PAGES = ("/held/", "/orders/", "/refunds/", "/activity/", "/reconcile/")
FEW, MANY = 10, 1000
TIME_GOAL = "<= 5"
QUERY_GOAL = "<= 1"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    django_setup("lists")
    sys.path.insert(0, str(ROOT))

    from django.db import connection, transaction
    from django.test import Client

    from sill.accounts.models import Agent, Site
    from sill.accounts.services import add_member
    from sill.ids import new_ulid
    from tests.refunds.list_rows import fill_page

    def measure(client: Client, path: str) -> tuple[float, int]:
        """(median milliseconds, queries) of ``GET path``."""
        for _ in range(3):
            client.get(path)
        sent: list[str] = []

        def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            sent.append(sql)
            return execute(sql, params, many, context)

        # An execute wrapper, not connection.queries: that log stops growing at 9,000 entries.
        with connection.execute_wrapper(count):
            answer = client.get(path)
        if answer.status_code != 200:
            raise SystemExit(f"GET {path}: {answer.status_code}")
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times), len(sent)

    for path in PAGES:
        with transaction.atomic():
            site = Site.objects.create(
                id=new_ulid(), name="Bench lists", merchant_domain="lists.example"
            )
            owner = add_member(
                site=site, email=f"owner-{site.pk.lower()}@lists.example", role="owner"
            )
            agent = Agent.objects.create(site=site, agent_id="agent_bench", refund_enabled=True)
            client = Client()
            client.force_login(owner.user)
            fill_page(path, site, agent, FEW)
            few_ms, few_queries = measure(client, path)
            fill_page(path, site, agent, MANY - FEW)
            many_ms, many_queries = measure(client, path)
            transaction.set_rollback(True)  # leave the database as it was
        figure(
            f"{path} at {MANY:,} rows",
            value=many_ms,
            baseline_name=f"{path} at {FEW} rows",
            baseline=few_ms,
            unit="ms",
            goal=TIME_GOAL,
        )
        figure(
            f"{path} queries at {MANY:,} rows",
            value=many_queries,
            baseline_name=f"at {FEW} rows",
            baseline=few_queries,
            unit="queries",
            goal=QUERY_GOAL,
        )
    finish(__file__)


if __name__ == "__main__":
    main()
