"""Agent API over HTTP: a gunicorn server of this checkout, figures as ratios within one run.

Starts gunicorn servers of this checkout with 1, 2 and 4 sync workers side by side (an idle
server costs nothing, so rounds can alternate between them without restarts) on the bench's
database, and drives them from client threads in this process, a new connection per request
(gunicorn's sync workers close every connection anyway). Measured:

- the trivial authenticated endpoint ``GET /api/v1/agent`` (the baseline: authentication,
  middleware, DRF, rendering, no work), at 4 concurrent clients on 2 workers;
- mandates refused at the signature check (full parse, key lookup, ed25519, no writes), goal
  at least 0.8x the baseline, and approved refund decisions (verify, store, quote, decide,
  reserve, audit record, enqueue on commit), goal at least 0.5x, both at 4 clients, 2 workers;
- p50 / p90 / p99 latency of approved decisions at 1, 4 and 8 clients (2 workers), each
  against the baseline's same percentile at the same concurrency;
- decisions/s at 8 clients with 1, 2 and 4 workers (against 1 worker), and p99 at 8 clients
  with 1 worker against 2 workers;
- the acceptance figure: p99 of approved decisions at 8 clients with 4 workers against 2
  workers, goal "<= 1.1" (no worse; see README "Performance" for why 10 %). The 2- and
  4-worker rounds alternate, so drift on the machine hits both alike;
- where the machine's CPU goes (Linux, from /proc), per request in the 4-client rounds:
  the whole machine, the web workers, the database server and the rest (this client, the
  broker, the kernel), each for approved decisions against the GET. Once the cores are busy,
  the decisions' rate against the GET's cannot exceed the inverse of the first ratio.

Celery: no worker runs. An approved decision enqueues ``refunds.execute`` on commit (one
message to the embedded broker on SQLite, to Redis with REDIS_URL): that publish is part of
the decision's cost and is measured; executing the refund is not part of the answer, and a
worker executing refunds would compete with the web workers for the machine's cores, so the
messages are left in the broker and dropped with the throwaway database (``make bench``).

Run: `make bench` or `.venv/bin/python bench/agent_http.py [--requests N] [--rounds R]`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets as pysecrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import figure, finish, quick
from _setup import HISTORY, ROOT, django_setup, history, paid_agent_orders

WORKERS = (1, 2, 4)
# The acceptance figure: 4 workers' p99 at 8 clients may be this much above 2 workers'.
P99_TOLERANCE = 1.1
# Unmeasured decisions sent to each server first, per worker (see main()): PostgreSQL plans a
# prepared statement afresh for its first five runs on a connection, and a server's workers
# share the warm-up unevenly (each takes what it accepts first).
WARM_DECISIONS_PER_WORKER = 16
# The session ids of the gunicorn servers this run started (their workers share them).
SERVER_SESSIONS: set[int] = set()


@dataclass
class Load:
    """One measured batch: requests per second and each request's latency in ms."""

    rate: float
    latencies: list[float]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        # Nearest rank: the smallest latency with at least p % of the requests at or below it.
        rank = max(1, -(-len(ordered) * p // 100))
        return ordered[int(rank) - 1]


def merged(loads: list[Load]) -> Load:
    total = sum(len(x.latencies) for x in loads)
    seconds = sum(len(x.latencies) / x.rate for x in loads)
    return Load(total / seconds, [ms for x in loads for ms in x.latencies])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60 if quick() else 200)
    parser.add_argument("--rounds", type=int, default=1 if quick() else 4)
    args = parser.parse_args()
    n, rounds = args.requests, args.rounds
    data_dir = django_setup("http")
    warm = WARM_DECISIONS_PER_WORKER * sum(WORKERS)
    world = World.create(orders=HISTORY + warm + rounds * n + n // 2 + 2 * rounds * n + n)
    history(world.decisions(HISTORY))
    print(f"({len(world.originals)} orders ready, {HISTORY} decided before)", flush=True)

    env = {**os.environ, "SILL_DATA_DIR": str(data_dir), "SILL_TESTING": "1"}
    with ExitStack() as stack:
        ports = {w: stack.enter_context(gunicorn(w, env, data_dir)) for w in WORKERS}
        auth = {"Authorization": f"Bearer {world.token}"}
        trivial = {}
        for w, port in ports.items():
            # Warm every worker for both kinds of request: a worker's first decision opens its
            # broker connection and prepares the decision's statements on its database
            # connection, once per process; the figures are about the decisions after that.
            drive(port, "GET", "/api/v1/agent", [None] * 20, auth, 200, 4)
            drive(port, "POST", "/api/v1/mandates",
                  world.decisions(WARM_DECISIONS_PER_WORKER * w), {}, 201, w)  # fmt: skip
        # The baseline is cheap: twice as many requests per batch, for as steady a figure.
        for c in (1, 8):
            trivial[c] = drive(ports[2], "GET", "/api/v1/agent", [None] * 2 * n, auth, 200, c)
        # The machine's own answer to more workers than cores, with no decision work at all.
        trivial_on4 = drive(ports[4], "GET", "/api/v1/agent", [None] * 2 * n, auth, 200, 8)
        # The two goals against the baseline at 4 clients: rounds alternate between the
        # baseline, the refusals and the decisions, so drift on the machine hits all alike.
        at4: dict[str, list[Load]] = {"trivial": [], "forged": [], "decided": []}
        cpu = {"trivial": CPU(), "decided": CPU()}
        for _ in range(rounds):
            with cpu["trivial"].measuring(2 * n):
                at4["trivial"].append(
                    drive(ports[2], "GET", "/api/v1/agent", [None] * 2 * n, auth, 200, 4)
                )
            at4["forged"].append(
                drive(ports[2], "POST", "/api/v1/mandates", world.forged(n), {}, 401, 4)
            )
            with cpu["decided"].measuring(n):
                at4["decided"].append(
                    drive(ports[2], "POST", "/api/v1/mandates", world.decisions(n), {}, 201, 4)
                )
        trivial[4], forged = merged(at4["trivial"]), merged(at4["forged"])
        decided = {4: merged(at4["decided"])}
        decided[1] = drive(
            ports[2], "POST", "/api/v1/mandates", world.decisions(n // 2), {}, 201, 1
        )
        at8: dict[int, list[Load]] = {2: [], 4: []}
        for _ in range(rounds):
            for w in (2, 4):
                at8[w].append(
                    drive(ports[w], "POST", "/api/v1/mandates", world.decisions(n), {}, 201, 8)
                )
        one = drive(ports[1], "POST", "/api/v1/mandates", world.decisions(n), {}, 201, 8)
    decided[8] = merged(at8[2])
    four = merged(at8[4])
    world.check_approved()

    figure(
        "bad-signature refusals, 4 clients, 2 workers", value=forged.rate,
        baseline_name="GET /api/v1/agent", baseline=trivial[4].rate, unit="req/s", goal=">= 0.8",
    )  # fmt: skip
    figure(
        "approved decisions, 4 clients, 2 workers", value=decided[4].rate,
        baseline_name="GET /api/v1/agent", baseline=trivial[4].rate, unit="req/s", goal=">= 0.5",
    )  # fmt: skip
    if cpu["decided"].readable:
        for part in CPU.PARTS:
            figure(
                f"{part} CPU per approved decision, 4 clients, 2 workers",
                value=cpu["decided"].per_request(part),
                baseline_name="per GET /api/v1/agent",
                baseline=cpu["trivial"].per_request(part),
                unit="ms",
            )
    for c in (1, 4, 8):
        for p in (50, 90, 99):
            figure(
                f"approved decision p{p}, {c} client{'s' if c > 1 else ''}, 2 workers",
                value=decided[c].percentile(p),
                baseline_name=f"GET /api/v1/agent p{p}",
                baseline=trivial[c].percentile(p),
                unit="ms",
            )
    for w, load in ((2, decided[8]), (4, four)):
        figure(
            f"approved decisions, 8 clients, {w} workers", value=load.rate,
            baseline_name="the same, 1 worker", baseline=one.rate, unit="req/s",
        )  # fmt: skip
    if rounds > 1:
        # The run's own noise: the same server and load, measured twice.
        figure(
            "noise: p99, 8 clients, 2 workers, last round vs first", value=at8[2][-1].percentile(99),
            baseline_name="first round", baseline=at8[2][0].percentile(99), unit="ms",
        )  # fmt: skip
    figure(
        "trivial GET p99, 8 clients: 4 workers vs 2", value=trivial_on4.percentile(99),
        baseline_name="2 workers", baseline=trivial[8].percentile(99), unit="ms",
    )  # fmt: skip
    figure(
        "approved decision p99, 8 clients: 1 worker vs 2", value=one.percentile(99),
        baseline_name="2 workers", baseline=decided[8].percentile(99), unit="ms",
    )  # fmt: skip
    figure(
        "approved decision p99, 8 clients: 4 workers vs 2", value=four.percentile(99),
        baseline_name="2 workers", baseline=decided[8].percentile(99), unit="ms",
        goal=f"<= {P99_TOLERANCE}",
    )  # fmt: skip
    print(
        f"({n} requests per batch, {rounds} alternating rounds of 8 clients on 2 and 4 workers, "
        f"{'PostgreSQL' if os.environ.get('DATABASE_URL') else 'SQLite'}, no Celery worker)"
    )
    finish(__file__)


class World:
    """A demo site with an agent, its key and token, and paid orders to refund, one each."""

    def __init__(self, site, agent, key, token: str, originals: list[str]) -> None:
        self.site, self.agent, self.key, self.token = site, agent, key, token
        self.originals = originals
        self._next = 0

    @classmethod
    def create(cls, *, orders: int) -> World:
        from nacl.signing import SigningKey

        from refunds.demo import DEMO_SITE_ID, load_demo
        from sill.accounts import two_factor
        from sill.accounts.models import Agent, AgentKey, Site
        from sill.accounts.services import issue_agent_token

        load_demo()
        site = Site.objects.get(pk=DEMO_SITE_ID)
        agent = Agent.objects.get(site=site, agent_id="agent_acme_shopper")
        key = SigningKey(bytes(range(7, 39)))
        AgentKey.objects.create(
            agent=agent, key_id="bench", public_key=bytes(key.verify_key),
            valid_from=datetime(2026, 1, 1, tzinfo=UTC),
        )  # fmt: skip
        token = issue_agent_token(
            agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
        )  # as `agents token`
        originals = paid_agent_orders(site, agent, orders)
        return cls(site, agent, key, token, originals)

    def _body(self, original: str, signer) -> bytes:
        from refunds.agent.mandates import canonical_json, sign_mandate
        from sill.ids import new_ulid

        now = datetime.now(UTC).replace(microsecond=0)
        signed = {
            "mandate_id": f"mnd_{new_ulid()}", "site_id": self.site.id,
            "agent_id": self.agent.agent_id,
            "issued_at": now.isoformat().replace("+00:00", "Z"),
            "expires_at": (now + timedelta(seconds=280)).isoformat().replace("+00:00", "Z"),
            "nonce": pysecrets.token_urlsafe(16), "replay_window_seconds": 300,
            "intent": {
                "action": "request_refund", "merchant": self.site.merchant_domain,
                "original_mandate_id": original, "reason_code": "wrong_item", "scope": "full",
                "max_amount": Decimal("20.00"), "currency": "USD",
            },
        }  # fmt: skip
        return canonical_json(sign_mandate(signed, signer, "bench"))

    def decisions(self, count: int) -> list[bytes]:
        """``count`` fresh mandates, each for an order not refunded yet (signed just now)."""
        take = self.originals[self._next : self._next + count]
        if len(take) < count:
            raise SystemExit("not enough orders prepared")
        self._next += count
        return [self._body(o, self.key) for o in take]

    def forged(self, count: int) -> list[bytes]:
        from nacl.signing import SigningKey

        other = SigningKey(bytes(32))
        return [self._body(self.originals[-1], other) for _ in range(count)]

    def check_approved(self) -> None:
        """Every decision measured was an approval (else the figures measure something else)."""
        from refunds.models import Refund

        made = Refund.objects.filter(site=self.site, agent=self.agent)
        decisions = dict(made.values_list("decision").annotate(n=_count()).order_by())
        approved = decisions.pop("approved", 0)
        if decisions or approved != self._next:
            raise SystemExit(
                f"expected {self._next} approved decisions, found {approved} and {decisions}"
            )


def _count():
    from django.db.models import Count

    return Count("id")


@contextmanager
def gunicorn(workers: int, env: dict[str, str], data_dir: Path) -> Iterator[int]:
    """A server of this checkout; its log (every refusal is a logged 401) goes to a file."""
    port = _free_port()
    log = (data_dir / f"gunicorn-{workers}.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "sill.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--log-level", "warning", "--backlog", "256"],
        cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=log,
    )  # fmt: skip
    SERVER_SESSIONS.add(server.pid)
    try:
        _wait(port, server, log.name)
        yield port
    finally:
        SERVER_SESSIONS.discard(server.pid)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


class CPU:
    """CPU time of the machine and of its parts over measured batches, from /proc (Linux;
    elsewhere ``readable`` is False and nothing is counted).

    Parts: the gunicorn servers' processes (their sessions), the PostgreSQL server's
    processes, and the rest of the machine's busy time (user, system and interrupt time of
    /proc/stat: this client, the broker, the kernel's own threads).
    """

    PARTS = ("machine", "web workers", "database server", "rest of the machine")

    def __init__(self) -> None:
        self.readable = Path("/proc/stat").exists()
        self.seconds = dict.fromkeys(self.PARTS, 0.0)
        self.requests = 0

    @contextmanager
    def measuring(self, requests: int) -> Iterator[None]:
        before = self._now() if self.readable else None
        yield
        if before is None:
            return
        after = self._now()
        (machine0, processes0), (machine1, processes1) = before, after
        # Per process, so one that exits meanwhile takes only its own time along (a
        # process that started meanwhile counts from zero).
        for pid, (part, used) in processes1.items():
            self.seconds[part] += used - processes0.get(pid, (part, 0.0))[1]
        self.seconds["machine"] += machine1 - machine0
        self.requests += requests

    def per_request(self, part: str) -> float:
        """Milliseconds of ``part`` per request measured."""
        seconds = self.seconds[part]
        if part == "rest of the machine":
            seconds = self.seconds["machine"] - self.seconds["web workers"]
            seconds -= self.seconds["database server"]
        return seconds / max(1, self.requests) * 1000

    @staticmethod
    def _now() -> tuple[float, dict[int, tuple[str, float]]]:
        """The machine's busy seconds, and each web or database process's part and seconds."""
        tick = os.sysconf("SC_CLK_TCK")
        processes = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rpartition(")")[2].split()
            used = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
            if int(fields[3]) in SERVER_SESSIONS:
                processes[int(entry.name)] = ("web workers", used)
            elif name.startswith("postgres"):
                processes[int(entry.name)] = ("database server", used)
        # The first line of /proc/stat: user nice system idle iowait irq softirq steal ...
        times = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return (times[0] + times[1] + times[2] + times[5] + times[6]) / tick, processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, server: subprocess.Popen[bytes], log: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"gunicorn exited at start-up: {Path(log).read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("gunicorn did not start")


def drive(
    port: int,
    method: str,
    path: str,
    bodies: list[bytes | None],
    headers: dict[str, str],
    expect: int,
    clients: int,
) -> Load:
    """Send ``bodies`` from ``clients`` threads; every answer must be ``expect``."""

    def one(payload: bytes | None) -> float:
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request(
                method, path, body=payload, headers={**headers, "Content-Type": "application/json"}
            )
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != expect:
            raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
        return (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = list(pool.map(one, bodies))
    return Load(len(bodies) / (time.perf_counter() - started), latencies)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
