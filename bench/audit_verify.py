"""Audit verification speed as ratios to raw ed25519 measured in the same run (issue 18: the
goal is at least 0.5x).

Builds N signed, hash-chained records in memory (the payload shape of a decision record), then
times, in one process:
- raw ed25519 verification of the N record hashes (the floor: a verifier must do this much);
- ``audit.chain.verify_chain`` over the records (what `audit verify` and Activity's check run);
- the standalone verifier (``audit/verify_export.py``) over an export file of the same records;
- ``audit.merkle.root_of`` over their leaves (what a checkpoint check adds).

Pure computation (no database): ``make bench`` runs it once.

Run: `make bench` or `.venv/bin/python bench/audit_verify.py [--records N] [--rounds R]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import figure, finish, quick  # noqa: E402

DATABASE_INDEPENDENT = True
GOAL = ">= 0.5"


def build(n: int):
    import nacl.signing

    from audit import chain

    key = nacl.signing.SigningKey.generate()
    key_id = "sill-bench"
    prev, rows = chain.GENESIS_HASH, []
    for seq in range(1, n + 1):
        body = {
            "refund_id": f"rf_{seq:08d}", "order_id": f"ord_{seq:08d}", "amount_minor": 8900,
            "currency": "USD", "decision": "approved", "rules": [{"id": "r07", "action": "allow"}],
            "facts": {"refundFraction": {"num": 8900, "den": 8900}, "refundChargeAgeDays": 3},
        }  # fmt: skip
        payload = chain.canonical(
            {"site_id": "S", "seq": seq, "kind": "approved",
             "recorded_at": "2026-12-01T10:00:00.000Z", "body": body}
        )  # fmt: skip
        digest = chain.record_hash(prev, payload)
        rows.append(
            {"site_id": "S", "seq": seq, "kind": "approved", "payload": payload.decode(),
             "prev_hash": prev, "hash": digest, "signature": chain.sign_hash(digest, key),
             "key_id": key_id}
        )  # fmt: skip
        prev = digest
    return key, key_id, rows


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1000 if quick() else 5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from audit import chain, merkle, verify_export

    key, key_id, rows = build(args.records)
    public = {key_id: bytes(key.verify_key)}
    pairs = [(bytes.fromhex(r["hash"]), chain.b64url_decode(r["signature"])) for r in rows]
    verify_key = key.verify_key

    def raw() -> None:
        for message, signature in pairs:
            verify_key.verify(message, signature)

    def sill() -> None:
        assert chain.verify_chain(rows, public).ok

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.jsonl"
        header = {"type": "header", "format": "sill-audit-export-v1", "site_id": "S",
                  "public_keys": {key_id: chain.b64url_encode(bytes(key.verify_key))}}  # fmt: skip
        lines = [json.dumps(header)] + [json.dumps({"type": "record", **r}) for r in rows]
        path.write_text("\n".join(lines) + "\n")
        text_lines = path.read_text().splitlines()

        def standalone() -> None:
            verify_export.verify_export(text_lines, None, None)

        leaves = [merkle.record_leaf_hash(r["payload"]) for r in rows]

        def tree() -> None:
            merkle.root_of(leaves)

        n = args.records
        figures = {
            "raw ed25519": best(raw, args.rounds),
            "audit verify (verify_chain)": best(sill, args.rounds),
            "standalone verifier": best(standalone, args.rounds),
            "Merkle root of the leaves": best(tree, args.rounds),
        }
    floor = figures["raw ed25519"]
    goals = {"audit verify (verify_chain)": GOAL}
    for name, seconds in figures.items():
        if name == "raw ed25519":
            continue
        figure(
            name,
            value=n / seconds,
            baseline_name="raw ed25519",
            baseline=n / floor,
            unit="records/s",
            goal=goals.get(name, ""),
        )
    print(f"(best of {args.rounds} rounds of {n} records, in one process)")
    finish(__file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
