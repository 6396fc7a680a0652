"""Where one approved agent refund decision spends its time, in-process (issue 18, point 1).

Prints, from one run on this machine (PostgreSQL + Redis when DATABASE_URL / REDIS_URL are
set, else SQLite and the embedded broker):
- the queries one approved decision sends (every statement, SAVEPOINTs included), against
  the goal of a handful (12, on PostgreSQL);
- approved decisions per second through Django's test client (middleware, DRF, intake,
  commit, on-commit enqueue), against the trivial authenticated ``GET /api/v1/agent``
  measured the same way in the same run; and the process CPU of each, likewise;
- the process CPU of each stage of a decision (``STAGES``: the request's middleware, the
  mandate's parse, the key's read, the verification, the rail's facts, the mandate INSERT,
  the order's lock, quote and policy, the audit append, COMMIT, the enqueue, the answer...),
  measured with a CPU clock around each stage's function, each stage's own time (stages it
  calls excluded): they add up to the decision's CPU, and timing them costs about a
  microsecond a stage, where cProfile's per-call hook inflates call-heavy code several times;
- a cProfile (process CPU time) of the decisions split into SQL (the cursor and the commit:
  the driver's work, building statements and reading rows excluded), canonicalisation
  (RFC 8785), ed25519 (signing and verifying), rendering (DRF's JSON renderer), the
  on-commit enqueue (Celery's ``apply_async``) and the rest, as shares of the decision.

Run: `.venv/bin/python bench/decision_profile.py [--decisions N]`.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import figure, finish
from _setup import HISTORY, django_setup, history, paid_agent_orders

QUERY_GOAL = 12

# (category, predicate on cProfile's (file, line, function) key). The first match wins and
# only the outermost call of a category counts, so nested calls are not counted twice.
CATEGORIES: list[tuple[str, Callable[[tuple[str, int, str]], bool]]] = [
    ("sql", lambda k: k[0].endswith("django/db/backends/utils.py") and k[2] == "_execute"),
    ("sql", lambda k: k[0].endswith("django/db/backends/base/base.py") and k[2] == "_commit"),
    ("canonicalisation", lambda k: "rfc8785" in k[0] and k[2] == "dumps"),
    ("ed25519", lambda k: k[0].endswith("nacl/bindings/crypto_sign.py")),
    ("rendering", lambda k: k[0].endswith("rest_framework/renderers.py") and k[2] == "render"),
    ("enqueue", lambda k: k[0].endswith("celery/app/task.py") and k[2] == "apply_async"),
]


# (label, module, attribute): the functions whose calls are a decision's stages, outermost
# first. An attribute "Class.method" is a method; a plain function is replaced wherever a
# module holds it (``from x import f`` binds it in the importing module too).
STAGES: list[tuple[str, str, str]] = [
    ("request: middleware, routing", "django.core.handlers.base", "BaseHandler.get_response"),
    ("DRF dispatch", "rest_framework.views", "APIView.dispatch"),
    (
        "agent token (the GET's authentication)",
        "refunds.agent.api",
        "AgentTokenAuthentication.authenticate",
    ),
    ("intake (the rest)", "refunds.agent.intake", "submit_mandate"),
    ("parse and canonicalise", "refunds.agent.mandates", "load_mandate"),
    ("key, agent, site, original", "refunds.agent.intake", "_agent_key"),
    ("verification: signature, schema", "refunds.agent.mandates", "verify_mandate"),
    ("rate limit", "refunds.agent.intake", "spend_mandate_budget"),
    ("rail facts", "refunds.agent.intake", "_prefetch_rail_facts"),
    ("mandate INSERT", "refunds.agent.intake", "_store"),
    ("decision (the rest)", "refunds.agent.intake", "_request_refund"),
    ("order and charge lock", "refunds.quote", "locked_order_and_charge"),
    ("quote", "refunds.quote", "quote_refund"),
    ("policy", "policies.decide", "decide_refund"),
    ("refund built", "refunds.services", "unsaved_refund"),
    ("decision record (the rest)", "refunds.services", "record_decision"),
    ("audit append", "audit.services", "append_record"),
    ("COMMIT", "django.db.backends.base.base", "BaseDatabaseWrapper._commit"),
    ("enqueue (Celery)", "celery.app.task", "Task.apply_async"),
    ("answer and receipt", "refunds.agent.intake", "refund_payload"),
    ("JSON rendering", "rest_framework.renderers", "JSONRenderer.render"),
]


class StageClock:
    """Process CPU per stage (:data:`STAGES`), each stage's own: a stage called inside another
    is subtracted from the outer one, so the stages and the caller's rest add up to the whole."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {label: 0.0 for label, _m, _a in STAGES}
        self._inner: list[float] = []  # per open stage: CPU its inner stages took

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock, own, inner = time.process_time, self.own, self._inner

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                took = clock() - start
                nested = inner.pop()
                own[label] += took - nested
                if inner:
                    inner[-1] += took

        return timed

    def install(self) -> None:
        import importlib

        for label, module_name, attribute in STAGES:
            module = importlib.import_module(module_name)
            owner_name, _, name = attribute.rpartition(".")
            if owner_name:
                owner = getattr(module, owner_name)
                setattr(owner, name, self._wrap(label, owner.__dict__[name]))
                continue
            original = getattr(module, name)
            timed = self._wrap(label, original)
            for loaded in list(sys.modules.values()):
                names = getattr(loaded, "__dict__", None) or {}
                for key, value in list(names.items()):
                    if value is original:
                        setattr(loaded, key, timed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decisions", type=int, default=150)
    parser.add_argument("--top", type=int, default=0, help="also print the N costliest functions")
    args = parser.parse_args()
    django_setup("decision_profile")

    import secrets as pysecrets

    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from nacl.signing import SigningKey

    from refunds.agent.mandates import canonical_json, sign_mandate
    from refunds.demo import DEMO_SITE_ID, load_demo
    from sill.accounts import two_factor
    from sill.accounts.models import Agent, AgentKey, Site
    from sill.accounts.services import issue_agent_token
    from sill.ids import new_ulid

    load_demo()
    site = Site.objects.get(pk=DEMO_SITE_ID)
    agent = Agent.objects.get(site=site, agent_id="agent_acme_shopper")
    key = SigningKey(bytes(range(7, 39)))
    AgentKey.objects.get_or_create(
        agent=agent,
        key_id="bench",
        defaults={
            "public_key": bytes(key.verify_key),
            "valid_from": datetime(2026, 1, 1, tzinfo=UTC),
        },
    )  # a database kept from an earlier run has it
    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )  # as `agents token`

    warm, profiled = 10, 30
    n = HISTORY + 2 * args.decisions + warm + profiled + 1
    originals = paid_agent_orders(site, agent, n)

    def body(original: str) -> bytes:
        now = datetime.now(UTC).replace(microsecond=0)
        signed = {
            "mandate_id": f"mnd_{new_ulid()}", "site_id": site.id, "agent_id": agent.agent_id,
            "issued_at": now.isoformat().replace("+00:00", "Z"),
            "expires_at": (now + timedelta(seconds=280)).isoformat().replace("+00:00", "Z"),
            "nonce": pysecrets.token_urlsafe(16), "replay_window_seconds": 300,
            "intent": {
                "action": "request_refund", "merchant": site.merchant_domain,
                "original_mandate_id": original, "reason_code": "wrong_item", "scope": "full",
                "max_amount": Decimal("20.00"), "currency": "USD",
            },
        }  # fmt: skip
        return canonical_json(sign_mandate(signed, key, "bench"))

    bodies = [body(o) for o in originals]
    history(bodies[:HISTORY])
    bodies = bodies[HISTORY:]
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def decide(payload: bytes) -> None:
        answer = client.post("/api/v1/mandates", data=payload, content_type="application/json")
        if answer.status_code != 201 or answer.json()["decision"] != "approved":
            raise SystemExit(f"not an approved decision: {answer.status_code} {answer.content!r}")

    def trivial() -> None:
        answer = client.get("/api/v1/agent", **auth)
        if answer.status_code != 200:
            raise SystemExit(f"GET /api/v1/agent: {answer.status_code}")

    for payload in bodies[:warm]:
        decide(payload)
    for _ in range(50):
        trivial()
    bodies = bodies[warm:]

    # Queries of one decision, every statement counted.
    with CaptureQueriesContext(connection) as captured:
        decide(bodies.pop())
    statements = [q["sql"] for q in captured.captured_queries]
    savepoints = sum(s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT")) for s in statements)

    # Throughput and CPU: the trivial GET, then the decisions, then the GET again (averaged,
    # so a drift of the machine's load during the run does not favour either side).
    # The database server's own CPU for this process's connection, where it can be read: a
    # PostgreSQL backend on this machine (its /proc entry). None otherwise (SQLite runs in
    # this process, so its work is already in the process's CPU).
    backend_stat: Path | None = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend_stat = Path(f"/proc/{cursor.fetchone()[0]}/stat")
        if not backend_stat.exists():
            backend_stat = None

    def db_cpu() -> float:
        if backend_stat is None:
            return 0.0
        fields = backend_stat.read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def run(fn: Callable[[], None], count: int) -> tuple[float, float, float]:
        wall, cpu, db = time.perf_counter(), time.process_time(), db_cpu()
        for _ in range(count):
            fn()
        return (
            (time.perf_counter() - wall) / count,
            (time.process_time() - cpu) / count,
            (db_cpu() - db) / count,
        )

    gets = max(200, args.decisions)
    get_wall1, get_cpu1, get_db1 = run(trivial, gets)
    queue = iter(bodies[: args.decisions])
    dec_wall, dec_cpu, dec_db = run(lambda: decide(next(queue)), args.decisions)
    get_wall2, get_cpu2, get_db2 = run(trivial, gets)
    get_wall, get_cpu = (get_wall1 + get_wall2) / 2, (get_cpu1 + get_cpu2) / 2
    get_db = (get_db1 + get_db2) / 2
    bodies = bodies[args.decisions :]

    # The profile, over decisions not yet sent.
    # CPU time, not wall time: waiting for PostgreSQL is not the web process's cost.
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for payload in bodies[:profiled]:
        decide(payload)
    profiler.disable()
    stats = pstats.Stats(profiler)

    # Each stage's CPU, over decisions not yet sent (the clock stays on the functions after).
    bodies = bodies[profiled:]
    staged = min(len(bodies), args.decisions)
    stages = StageClock()
    stages.install()
    stage_cpu = time.process_time()
    for payload in bodies[:staged]:
        decide(payload)
    stage_cpu = (time.process_time() - stage_cpu) / staged
    bodies = bodies[staged:]
    decision_stages = dict(stages.own)
    for name in stages.own:  # in place: the timed functions hold this dict
        stages.own[name] = 0.0
    get_stage_cpu = time.process_time()
    for _ in range(gets):
        trivial()
    get_stage_cpu = (time.process_time() - get_stage_cpu) / gets
    get_stages = dict(stages.own)

    shares = _shares(stats)
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)

    total = shares.pop("total")
    print(f"one approved decision: {len(statements)} statements ({savepoints} savepoint ones)")
    for sql in statements:
        print("   ", sql[:110])
    print(
        f"profile of {profiled} decisions ({total / profiled * 1000:.2f} ms CPU each under cProfile):"
    )
    for name, seconds in shares.items():
        print(f"    {name:18} {seconds / total:6.1%}  {seconds / profiled * 1000:7.2f} ms")

    print(
        f"CPU of each stage ({staged} decisions, {stage_cpu * 1000:.2f} ms each;"
        f" {gets} GETs, {get_stage_cpu * 1000:.2f} ms each):"
    )
    outside = "outside the stages (test client)"
    rows = [
        *(
            (name, seconds / staged, get_stages[name] / gets)
            for name, seconds in decision_stages.items()
        ),
        (
            outside,
            stage_cpu - sum(decision_stages.values()) / staged,
            get_stage_cpu - sum(get_stages.values()) / gets,
        ),
    ]
    print(f"    {'stage':40} {'decision':>18} {'GET':>18}")
    for name, decision_s, get_s in rows:
        print(
            f"    {name:40} {decision_s * 1000:7.3f} ms {decision_s / stage_cpu:6.1%}"
            f"  {get_s * 1000:7.3f} ms {get_s / get_stage_cpu:6.1%}"
        )

    # The goal is PostgreSQL's: SQLite has no data-modifying WITH, so the audit append's
    # writes (the head, the record, its tree nodes, the refund, the reservation) go one by one.
    figure(
        "queries per approved decision", value=len(statements), baseline_name="goal",
        baseline=QUERY_GOAL, unit="queries",
        goal="<= 1.0" if connection.vendor == "postgresql" else "",
    )  # fmt: skip
    figure(
        "approved decisions in-process", value=1 / dec_wall,
        baseline_name="GET /api/v1/agent in-process", baseline=1 / get_wall, unit="/s",
        goal=">= 0.5",
    )  # fmt: skip
    figure(
        "CPU per approved decision", value=dec_cpu * 1000,
        baseline_name="CPU per GET /api/v1/agent", baseline=get_cpu * 1000, unit="ms",
    )  # fmt: skip
    if backend_stat is not None:
        figure(
            "database server CPU per approved decision", value=dec_db * 1000,
            baseline_name="per GET /api/v1/agent", baseline=max(get_db, 1e-6) * 1000, unit="ms",
        )  # fmt: skip
    for what, own, count, each in (
        ("decision", decision_stages, staged, stage_cpu),
        ("GET", get_stages, gets, get_stage_cpu),
    ):
        for name, seconds in own.items():
            if seconds:
                figure(
                    f"{what} CPU in stage: {name}", value=seconds / count * 1000,
                    baseline_name=f"CPU per {what} (stages timed)", baseline=each * 1000,
                    unit="ms",
                )  # fmt: skip
    for name, seconds in shares.items():
        figure(
            f"decision time in {name}", value=seconds / profiled * 1000,
            baseline_name="decision under cProfile", baseline=total / profiled * 1000, unit="ms",
        )  # fmt: skip
    finish(__file__)


def _shares(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per category (outermost calls only) and in the rest; ``total`` is all of it."""
    raw = stats.stats  # type: ignore[attr-defined]  # {key: (cc, nc, tt, ct, callers)}
    keyed: dict[tuple[str, int, str], str] = {}
    for key in raw:
        for name, matches in CATEGORIES:
            if matches(key):
                keyed[key] = name
                break
    shares = {name: 0.0 for name, _ in CATEGORIES}
    for key, name in keyed.items():
        _cc, _nc, _tt, ct, callers = raw[key]
        # Subtract the time spent in calls from inside the same category (nesting).
        nested = sum(v[3] for caller, v in callers.items() if keyed.get(caller) == name)
        shares[name] += ct - nested
    # Building statements and turning rows into objects: Django's ORM code itself (its own
    # time only, so the SQL it runs is not counted again).
    shares["orm"] = sum(v[2] for key, v in raw.items() if "django/db/models/" in key[0])
    total = sum(tt for _cc, _nc, tt, _ct, _callers in raw.values())
    shares["rest"] = total - sum(shares.values())
    shares["total"] = total
    return shares


if __name__ == "__main__":
    main()
