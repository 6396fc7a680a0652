"""Benchmark: the rule evaluator and the preview of the support-refunds pack.

Standalone (``python bench/policies.py``): sets up Django on a throwaway SQLite database in a
temporary data directory, stores 10,000 refund requests with fact snapshots over the last 30
days, then measures

* rule evaluations per second of the compiled support-refunds pack, against a hand-written
  Python function with the same four conditions (the floor any evaluator could reach), and
* the preview (``policies.selectors.preview_for``) over the 10,000 stored requests, against
  reading the same rows alone.

Acceptance (issue 4): the preview answers in under 2 s. The script exits 1 if it does not.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REQUESTS = 10_000
PREVIEW_LIMIT_S = 2.0


def setup_django(data_dir: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "sill.settings"
    os.environ["SILL_TESTING"] = "1"
    os.environ["SILL_DATA_DIR"] = data_dir
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)  # always the throwaway SQLite file, never a shared database
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


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
    # Spread them over the last 30 days (created_at is auto_now_add, so set it afterwards).
    for i, pk in enumerate(Refund.objects.filter(site=site).values_list("pk", flat=True)):
        if i % 3 == 0:
            Refund.objects.filter(pk=pk).update(created_at=now - timedelta(days=i % 29, hours=1))


def best_of(runs: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def hand_written(facts: dict[str, Any]) -> str:
    """support-refunds written out by hand for these exact facts: the floor."""
    worst = 0
    usd = facts["refundAmountUsd"]
    if usd is None or usd[0] > 25000:
        worst = max(worst, 1)
    age = facts["refundChargeAgeDays"]
    if age is None or age[0] > 60:
        worst = max(worst, 1)
    count = facts["refundCustomerRefunds30d"]
    if count is None or count[0] >= 1:
        worst = 2
    disputed = facts["refundDisputed"]
    if disputed is None or disputed is True:
        worst = 2
    return ("allow", "require_approval", "deny")[worst]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="sill-bench-policies-") as data_dir:
        setup_django(data_dir)
        from policies.catalog import PACKS, build_rules
        from policies.engine import compile_policy, evaluate, prepare_facts
        from policies.selectors import preview_for, refund_requests_for
        from sill.accounts.models import Site

        rng = random.Random(4)
        site = Site.objects.create(name="Bench", merchant_domain="bench.example")
        store_requests(site, rng)
        rules = build_rules(PACKS["support-refunds"], params=None, mode="enforced")
        policy = compile_policy(rules)

        from django.utils import timezone

        stored = refund_requests_for(site, since=timezone.now() - timedelta(days=30))
        prepared = [prepare_facts(r.facts or {}) for r in stored]
        assert len(prepared) == REQUESTS, len(prepared)

        # The hand-written floor and the engine must agree on every request.
        engine_actions = [evaluate(policy, f).action for f in prepared]
        assert engine_actions == [hand_written(f) for f in prepared]

        rule_evals = len(prepared) * len(policy.rules)
        engine_s = best_of(5, lambda: [evaluate(policy, f) for f in prepared])
        floor_s = best_of(5, lambda: [hand_written(f) for f in prepared])
        print(f"support-refunds: {len(policy.rules)} rules x {len(prepared):,} fact snapshots")
        print(
            f"  engine       {rule_evals / engine_s:>12,.0f} rule evaluations/s "
            f"({engine_s * 1000:.1f} ms)"
        )
        print(
            f"  hand-written {rule_evals / floor_s:>12,.0f} rule evaluations/s "
            f"({floor_s * 1000:.1f} ms, baseline)"
        )
        print(f"  ratio        engine takes {engine_s / floor_s:.2f}x the hand-written time")

        fetch_s = best_of(
            3, lambda: refund_requests_for(site, since=timezone.now() - timedelta(days=30))
        )
        preview_times = []
        for _ in range(5):
            start = time.perf_counter()
            preview = preview_for(site=site, rules=rules)
            preview_times.append(time.perf_counter() - start)
        assert preview.evaluated == REQUESTS
        median = statistics.median(preview_times)
        print(f"preview of support-refunds over {preview.evaluated:,} stored requests")
        print(f"  preview      median {median:.3f} s, best {min(preview_times):.3f} s")
        print(f"  read rows    {fetch_s:.3f} s (baseline: the query and JSON decoding alone)")
        print(f"  ratio        preview takes {median / fetch_s:.2f}x reading the rows")
        print(
            f"  outcomes     held {preview.draft['require_approval']:,}, "
            f"denied {preview.draft['deny']:,}, allowed {preview.draft['allow']:,}"
        )
        verdict = "OK" if median < PREVIEW_LIMIT_S else "TOO SLOW"
        print(f"  target       < {PREVIEW_LIMIT_S:.0f} s: {verdict}")
        return 0 if median < PREVIEW_LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
