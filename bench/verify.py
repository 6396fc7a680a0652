"""Mandate verification in-process: ``verify_mandate`` against its floor, measured in one run.

The floor is what any verifier of a Sill mandate has to do: parse the body as Sill requires
(:func:`sill.jsonbody.loads`: ``parse_float=Decimal``, duplicate keys, depth), write
``signed`` once in RFC 8785 form (the same canonicaliser ``verify_mandate`` uses), and check
one ed25519 signature with PyNaCl. ``verify_mandate`` adds the shape checks, the key's
validity window, the signature's strict base64url form, the subgroup check of the key, and
the whole schema. Figures:

- ``verify_mandate`` µs per mandate against the floor (goal: at most 1.3x its time);
- the floor against a bare ed25519 verification (informative);
- the floor written with the pure-Python ``rfc8785`` package (informative: what the C
  encoder path saves);
- a refused bad signature (``verify_mandate`` up to the signature check) against the floor
  (informative).

Timings (CPU time of the thread) alternate between the candidates, round by round, and keep
each one's best round, so a noisy neighbour on the machine slows them alike. No database: pure logic.

Run: ``make bench`` or ``.venv/bin/python bench/verify.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nacl.signing  # noqa: E402
import rfc8785  # noqa: E402
from _harness import figure, finish  # noqa: E402

from refunds.agent.mandates import (  # noqa: E402
    DOMAIN_TAG,
    KeyRecord,
    MandateError,
    canonical_json,
    canonicalisable,
    sign_mandate,
    verify_mandate,
)
from sill import jcs, jsonbody  # noqa: E402

# Pure computation: make bench runs it once, not per database.
DATABASE_INDEPENDENT = True

ISSUED = datetime(2026, 10, 1, 12, 0, tzinfo=UTC)
NOW = ISSUED + timedelta(seconds=5)


def refund_signed() -> dict[str, Any]:
    """A refund mandate as an agent sends one (the shape ``bench/mandates.py`` posts)."""
    return {
        "mandate_id": "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
        "site_id": "01JDEMOSITE00000000000MAIN",
        "agent_id": "agent_acme_shopper",
        "issued_at": "2026-10-01T12:00:00Z",
        "expires_at": "2026-10-01T12:04:40Z",
        "nonce": "Q8sLm2Vx7Tb4Nc1Rp9Kd3w",
        "replay_window_seconds": 300,
        "principal": {"type": "human", "verification": "delegated"},
        "intent": {
            "action": "request_refund",
            "merchant": "northwind-coffee.example",
            "original_mandate_id": "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
            "reason_code": "wrong_item",
            "scope": "full",
            "max_amount": Decimal("20.50"),
            "currency": "USD",
        },
        "protocol_context": {"protocol": "a2a", "version": "1.2"},
    }


def per_call_us(candidates: dict[str, Callable[[], Any]], *, seconds: float) -> dict[str, float]:
    """Best µs per call of each candidate, over rounds that alternate between them.

    CPU time of this thread (``time.thread_time``): the work is pure CPU, and time spent
    waiting for a core that four other processes want is not the function's."""
    best = {name: float("inf") for name in candidates}
    batch = 200
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for name, fn in candidates.items():
            started = time.thread_time()
            for _ in range(batch):
                fn()
            best[name] = min(best[name], (time.thread_time() - started) / batch * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()

    key = nacl.signing.SigningKey(bytes(range(7, 39)))
    public = bytes(key.verify_key)
    record = KeyRecord(public, datetime(2026, 1, 1, tzinfo=UTC), None, None)

    def lookup(_site: str, _agent: str, _key_id: str) -> KeyRecord:
        return record

    raw = canonical_json(sign_mandate(refund_signed(), key, "bench"))
    forged = canonical_json(
        sign_mandate(refund_signed(), nacl.signing.SigningKey(bytes(32)), "bench")
    )

    def verify() -> None:
        verify_mandate(raw, key_lookup=lookup, now=NOW)

    def refuse() -> None:
        try:
            verify_mandate(forged, key_lookup=lookup, now=NOW)
        except MandateError as exc:
            assert exc.code == "bad_signature", exc.code
        else:
            raise AssertionError("a forged mandate was accepted")

    def floor_with(canonicalise: Callable[[Any], bytes]) -> Callable[[], None]:
        def floor() -> None:
            doc = jsonbody.loads(raw)
            message = DOMAIN_TAG + canonicalise(doc["signed"])
            signature = base64.urlsafe_b64decode(doc["envelope"]["signature"] + "==")
            nacl.signing.VerifyKey(public).verify(message, signature)

        return floor

    floor = floor_with(jcs.canonical)
    floor_reference = floor_with(lambda signed: rfc8785.dumps(canonicalisable(signed)))
    doc = jsonbody.loads(raw)
    message = DOMAIN_TAG + jcs.canonical(doc["signed"])
    signature = base64.urlsafe_b64decode(doc["envelope"]["signature"] + "==")
    assert message == DOMAIN_TAG + rfc8785.dumps(canonicalisable(doc["signed"]))
    verify_key = nacl.signing.VerifyKey(public)

    def bare() -> None:
        verify_key.verify(message, signature)

    verify()
    refuse()
    us = per_call_us(
        {
            "verify": verify,
            "floor": floor,
            "bare": bare,
            "floor_reference": floor_reference,
            "refuse": refuse,
        },
        seconds=args.seconds,
    )
    floor_name = "parse + JCS(signed) + ed25519 verify"
    figure(
        "verify_mandate",
        value=us["verify"],
        baseline_name=floor_name,
        baseline=us["floor"],
        unit="µs",
        goal="<= 1.3",
    )
    # The issue's own floor was measured with the pure-Python canonicaliser (then 1.7x a bare
    # verify); the row above holds Sill to the stricter floor with its own fast canonicaliser.
    figure(
        "verify_mandate vs the floor with pure-Python rfc8785",
        value=us["verify"],
        baseline_name="parse + rfc8785(signed) + ed25519 verify",
        baseline=us["floor_reference"],
        unit="µs",
        goal="<= 1.3",
    )
    figure(
        "floor: parse + JCS + verify",
        value=us["floor"],
        baseline_name="bare ed25519 verify",
        baseline=us["bare"],
        unit="µs",
    )
    figure(
        "floor with pure-Python rfc8785",
        value=us["floor_reference"],
        baseline_name=floor_name,
        baseline=us["floor"],
        unit="µs",
    )
    figure(
        "verify_mandate, bad signature refused",
        value=us["refuse"],
        baseline_name=floor_name,
        baseline=us["floor"],
        unit="µs",
    )
    print(
        f"verify_mandate {1e6 / us['verify']:,.0f}/s, floor {1e6 / us['floor']:,.0f}/s, "
        f"bare ed25519 {1e6 / us['bare']:,.0f}/s (best of alternating rounds, {args.seconds:.0f} s)"
    )
    finish(__file__)


if __name__ == "__main__":
    main()
