"""Benchmark: the rule evaluator and the preview of the support-refunds pack.

Sets up Django (``bench/_setup.py``: a throwaway SQLite file, or ``DATABASE_URL``), stores
10,000 refund requests with fact snapshots over the last 30 days, then measures:

* the compiled support-refunds pack (4 rules) deciding each stored snapshot, as the decision
  step and the preview do (``evaluate(policy, prepare_facts(snapshot))``: the facts are
  prepared inside the timing), against a hand-written Python function with the same four
  conditions reading the same snapshots and answering the same things (the action and the
  rules that fired, unknown and malformed facts taking the restrictive branch): the floor
  any evaluator could reach. Goal: at least half its speed;
* the preview (``policies.selectors.preview_for``) over the 10,000 stored requests: under
  2 s (issue 4), and, informative, against reading the same rows alone.

Engine and hand-written function must agree on every snapshot, or the script stops.
Timings are CPU time of this thread (``time.thread_time``), best of alternating rounds.

Run: ``make bench`` or ``.venv/bin/python bench/policies.py``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import figure, finish
from _setup import django_setup

REQUESTS = 10_000
PREVIEW_LIMIT_S = 2.0
ACTIONS = ("allow", "require_approval", "deny")
RULES = ("large-refund", "old-charge", "customer-monthly", "disputed-deny")


def snapshot(rng: random.Random) -> dict[str, Any]:
    amount = rng.choice([500, 1500, 2900, 4500, 8900, 12000, 30000, 55000])
    count = rng.choice([0, 0, 1, 2, 5, 100])
    return {
        "factsVersion": 1,
        "refundAmount": amount,
        "refundAmountUsd": amount if rng.random() > 0.02 else None,
        "refundFraction": {"num": amount, "den": max(amount, 8900)},
        "refundChargeAgeDays": rng.randint(0, 120),
        "refundCustomerAgeDays": rng.choice([None, rng.randint(0, 900)]),
        "refundCustomerCount90d": {"value": count, "truncated": True} if count == 100 else count,
        "refundCustomerAmount90dUsd": rng.randint(0, 90000),
        "refundCustomerRefunds30d": rng.choice([None, 0, 0, 0, 1, 2]),
        "refundAgentTotalTodayUsd": rng.randint(0, 90000),
        "refundDisputed": rng.random() < 0.03,
        "refundReason": rng.choice(["wrong_item", "defective", "none", "not_received"]),
        "refundOrigin": rng.choice(["agent", "agent", "staff"]),
        "agentPlacedOriginal": rng.random() < 0.7,
        "rail": "mock",
        "currency": "USD",
    }


def store_requests(site: Any, rng: random.Random) -> None:
    from django.utils import timezone

    from refunds.models import Refund

    now = timezone.now()
    rows = []
    for _ in range(REQUESTS):
        facts = snapshot(rng)
        rows.append(
            Refund(
                site=site,
                origin=facts["refundOrigin"],
                amount_minor=facts["refundAmount"],
                currency="USD",
                decision="approved",
                status="succeeded",
                facts=facts,
            )
        )
    Refund.objects.bulk_create(rows, batch_size=1000)
    # Spread a third of them over the last 30 days (created_at is auto_now_add).
    pks = list(Refund.objects.filter(site=site).values_list("pk", flat=True))
    for day in range(29):
        chosen = [pk for i, pk in enumerate(pks) if i % 3 == 0 and i % 29 == day]
        Refund.objects.filter(pk__in=chosen).update(created_at=now - timedelta(days=day, hours=1))


def hand_written(facts: dict[str, Any]) -> tuple[str, list[str]]:
    """support-refunds written out by hand, on the stored snapshot: the floor.

    The same four conditions with the pack's default parameters; a fact that is missing or
    not an integer (a boolean for refundDisputed) is unknown and fires the rule, as the
    engine's restrictive branch does. None of these four facts can be a truncated bound.
    """
    fired = []
    worst = 0
    usd = facts.get("refundAmountUsd")
    if type(usd) is not int or usd > 25000:
        fired.append("large-refund")
        worst = 1
    age = facts.get("refundChargeAgeDays")
    if type(age) is not int or age > 60:
        fired.append("old-charge")
        worst = 1
    count = facts.get("refundCustomerRefunds30d")
    if type(count) is not int or count >= 1:
        fired.append("customer-monthly")
        worst = 2
    if facts.get("refundDisputed") is not False:
        fired.append("disputed-deny")
        worst = 2
    return ACTIONS[worst], fired


def best_rounds(candidates: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Best seconds (thread CPU time) of each candidate over alternating rounds."""
    best = {name: float("inf") for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            started = time.thread_time()
            fn()
            best[name] = min(best[name], time.thread_time() - started)
    return best


def main() -> int:
    django_setup("policies")
    from django.utils import timezone

    from policies.catalog import PACKS, build_rules
    from policies.engine import compile_policy, evaluate, prepare_facts
    from policies.selectors import preview_for, refund_requests_for
    from refunds.models import Refund
    from sill.accounts.models import Site

    rng = random.Random(4)
    site = Site.objects.create(name="Bench", merchant_domain="bench.example")
    try:
        store_requests(site, rng)
        rules = build_rules(PACKS["support-refunds"], params=None, mode="enforced")
        policy = compile_policy(rules)
        assert [r.id for r in policy.rules] == [f"tpl-{name}" for name in RULES], policy.rules

        stored = refund_requests_for(site, since=timezone.now() - timedelta(days=30))
        snapshots = [r.facts or {} for r in stored]
        assert len(snapshots) == REQUESTS, len(snapshots)

        # The hand-written floor and the engine must agree on every request.
        for facts in snapshots:
            result = evaluate(policy, prepare_facts(facts))
            fired = [f.id.removeprefix("tpl-") for f in result.fired]
            assert (result.action, fired) == hand_written(facts), facts

        seconds = best_rounds(
            {
                "engine": lambda: [evaluate(policy, prepare_facts(f)) for f in snapshots],
                "hand": lambda: [hand_written(f) for f in snapshots],
            },
            rounds=9,
        )
        figure(
            "rule engine (4 rules, from the snapshot)",
            value=REQUESTS / seconds["engine"],
            baseline_name="hand-written function",
            baseline=REQUESTS / seconds["hand"],
            unit="evaluations/s",
            goal=">= 0.5",
        )

        fetch_s = min(
            _timed(lambda: refund_requests_for(site, since=timezone.now() - timedelta(days=30)))
            for _ in range(3)
        )
        preview_times = []
        for _ in range(5):
            started = time.perf_counter()
            preview = preview_for(site=site, rules=rules)
            preview_times.append(time.perf_counter() - started)
        assert preview.evaluated == REQUESTS
        median = statistics.median(preview_times)
        figure(
            f"preview over {REQUESTS:,} requests",
            value=median,
            baseline_name="issue 4 limit",
            baseline=PREVIEW_LIMIT_S,
            unit="s",
            goal="<= 1",
        )
        figure(
            "preview against reading its rows",
            value=median,
            baseline_name="query + JSON decoding alone",
            baseline=fetch_s,
            unit="s",
        )
        print(
            f"support-refunds over {REQUESTS:,} snapshots: held "
            f"{preview.draft['require_approval']:,}, denied {preview.draft['deny']:,}, "
            f"allowed {preview.draft['allow']:,}"
        )
    finally:
        Refund.objects.filter(site=site).delete()
    figures = finish(__file__)
    return 0 if all(f.passed is not False for f in figures) else 1


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
