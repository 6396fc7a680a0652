"""Mandate throughput: verifications and decisions per second on a running server.

Prints, from one run on this machine:
- in-process ed25519 + JCS verification of a mandate (verify_mandate) per second;
- over HTTP against a gunicorn server of this checkout: a trivial authenticated endpoint
  (GET /api/v1/agent, the baseline), mandates refused at the signature check (full parsing,
  key lookup and ed25519 verification, no writes), and full refund decisions (verify, store,
  quote, lock, decide, reserve, audit record, enqueue), each with its ratio to the baseline.

Run: `make bench` or `.venv/bin/python bench/mandates.py [--requests N]`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import ROOT, django_setup

CONCURRENCY = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    data_dir = django_setup("mandates")

    import secrets as pysecrets

    from nacl.signing import SigningKey

    from refunds.agent.mandates import KeyRecord, canonical_json, sign_mandate, verify_mandate
    from refunds.demo import DEMO_SITE_ID, load_demo
    from sill.accounts.models import Agent, AgentKey, Site
    from sill.accounts.services import issue_agent_token
    from sill.ids import new_ulid
    from sill.money import parse_major
    from sill.orders.models import Charge, ChargeStatus, Order
    from sill.orders.services import NewLine, create_order

    load_demo()
    site = Site.objects.get(pk=DEMO_SITE_ID)
    agent = Agent.objects.get(site=site, agent_id="agent_acme_shopper")
    key = SigningKey(bytes(range(7, 39)))
    AgentKey.objects.create(
        agent=agent, key_id="bench", public_key=bytes(key.verify_key),
        valid_from=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    token = issue_agent_token(agent=agent)

    n = args.requests
    originals = []
    for i in range(n):
        mandate_id = f"mnd_{new_ulid()}"
        order = create_order(
            site=site, lines=[NewLine(sku="B", name="Bench", quantity=1, unit_price=parse_major("20.00", "USD"))],
            currency="USD", buyer_name="Bench", buyer_email=f"b{i}@example.com",
            source_mandate_id=mandate_id, placed_by_agent=agent,
        )  # fmt: skip
        Order.objects.filter(pk=order.pk).update(status="PAID")
        Charge.objects.create(
            order=order, rail="mock", amount_minor=2000, currency="USD",
            status=ChargeStatus.SUCCEEDED, captured_at=datetime.now(UTC),
        )  # fmt: skip
        originals.append(mandate_id)

    def body(original: str, *, signer: SigningKey = key) -> bytes:
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
        return canonical_json(sign_mandate(signed, signer, "bench"))

    # In-process verification.
    sample = body(originals[0])
    record = KeyRecord(bytes(key.verify_key), datetime(2026, 1, 1, tzinfo=UTC), None, None)
    now = datetime.now(UTC)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < 2.0:
        verify_mandate(sample, key_lookup=lambda *_: record, now=now)
        count += 1
    in_process = count / (time.perf_counter() - started)

    forged = [body(o, signer=SigningKey(bytes(32))) for o in originals]
    decisions = [body(o) for o in originals]

    port = _free_port()
    env = {
        **os.environ,
        "SILL_DATA_DIR": str(data_dir),
        "SILL_TESTING": "1",
        "PYTHONUNBUFFERED": "1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "sill.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        _wait(port)
        auth = {"Authorization": f"Bearer {token}"}
        _load(port, "GET", "/api/v1/agent", [None] * 50, auth, expect=200)  # warm up
        baseline = _load(port, "GET", "/api/v1/agent", [None] * n, auth, expect=200)
        verify_http = _load(port, "POST", "/api/v1/mandates", forged, {}, expect=401)
        decide_http = _load(port, "POST", "/api/v1/mandates", decisions, {}, expect=201)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)

    print(f"mandate verification in-process : {in_process:10.0f} /s")
    print(f"baseline GET /api/v1/agent       : {baseline:10.0f} req/s  (ratio 1.00)")
    print(
        f"verifications (bad_signature)    : {verify_http:10.0f} req/s  (ratio {verify_http / baseline:.2f})"
    )
    print(
        f"refund decisions (approved)      : {decide_http:10.0f} req/s  (ratio {decide_http / baseline:.2f})"
    )
    print(
        f"({n} requests each, {CONCURRENCY} client threads, gunicorn 2 workers, {os.environ.get('DATABASE_URL', 'SQLite').split('@')[-1]})"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def _load(port: int, method: str, path: str, bodies: list, headers: dict, *, expect: int) -> float:
    def one(payload: bytes | None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            hdrs = {**headers, "Content-Type": "application/json"}
            conn.request(method, path, body=payload, headers=hdrs)
            response = conn.getresponse()
            data = response.read()
            if response.status != expect:
                raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
            return response.status
        finally:
            conn.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, bodies))
    return len(bodies) / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
