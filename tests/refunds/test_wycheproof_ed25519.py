"""Wycheproof's ed25519 vectors against the signature check that mandate verification makes.

The vectors sign arbitrary messages, not mandates, so every one drives
``verify_ed25519`` (the function ``verify_mandate`` calls for the signature); the full
``verify_mandate`` path is then shown refusing the same attack shapes on real mandates.
The data file and its licence are in ``wycheproof/`` (see its README).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from refunds.agent.mandates import (
    KeyRecord,
    MandateError,
    _decode_signature,
    canonical_json,
    sign_mandate,
    verify_ed25519,
    verify_mandate,
)

VECTORS = json.loads((Path(__file__).parent / "wycheproof" / "ed25519_test.json").read_text())

# Sill's answer for each Wycheproof result. "acceptable" marks keys a verifier may refuse
# (small-order and mixed-order public keys): Sill refuses them, so it accepts exactly the
# "valid" vectors. An honest agent's key (a * B) is never of either kind.
POLICY = {"valid": True, "invalid": False, "acceptable": False}
ACCEPTABLE_FLAGS = {"SmallOrderPublicKey", "MixedOrderPublicKey"}

# Order of the prime-order subgroup of edwards25519 (RFC 8032 "L").
L = 2**252 + 27742317777372353535851937790883648493
IDENTITY = (1).to_bytes(32, "little")  # the neutral point's encoding: small order (1)

SITE = "01JDEMOSITE00000000000MAIN"
AGENT = "agent_acme_shopper"
KEY_ID = "acme-2026-10"
KEY = nacl.signing.SigningKey(bytes(range(32)))
ISSUED = datetime(2026, 9, 30, 15, 38, tzinfo=UTC)


def _cases() -> list[dict[str, Any]]:
    cases = []
    for group in VECTORS["testGroups"]:
        for test in group["tests"]:
            cases.append(
                {
                    "tc_id": test["tcId"],
                    "public_key": bytes.fromhex(group["publicKey"]["pk"]),
                    "key_info": group["publicKey"],
                    "msg": bytes.fromhex(test["msg"]),
                    "sig": bytes.fromhex(test["sig"]),
                    "result": test["result"],
                    "flags": tuple(test["flags"]),
                    "comment": test["comment"],
                }
            )
    return cases


CASES = _cases()


def _case_id(case: dict[str, Any]) -> str:
    return f"tc{case['tc_id']}-{case['result']}-{'+'.join(case['flags'])}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _signed() -> dict[str, Any]:
    stamp = ISSUED.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    expires = (ISSUED + timedelta(seconds=30)).isoformat(timespec="milliseconds")
    return {
        "mandate_id": "mnd_01K6HBK7MK753DH3YBX4NVCYTT",
        "site_id": SITE,
        "agent_id": AGENT,
        "issued_at": stamp,
        "expires_at": expires.replace("+00:00", "Z"),
        "nonce": "Q8sLm2Vx7Tb4Nc1Rp9Kd3w",
        "replay_window_seconds": 30,
        "intent": {
            "action": "request_refund",
            "merchant": "northwind-coffee.example",
            "original_mandate_id": "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN",
            "reason_code": "wrong_item",
            "scope": "full",
            "max_amount": 89,
            "currency": "USD",
        },
    }


def _verify(doc: dict[str, Any], public_key: bytes) -> Any:
    key = KeyRecord(
        public_key=public_key,
        valid_from=ISSUED - timedelta(days=30),
        valid_until=None,
        revoked_at=None,
    )

    def lookup(site_id: str, agent_id: str, key_id: str) -> KeyRecord | None:
        return key if (site_id, agent_id, key_id) == (SITE, AGENT, KEY_ID) else None

    return verify_mandate(
        canonical_json(doc), key_lookup=lookup, now=ISSUED + timedelta(seconds=10)
    )


def _with_signature(signature: bytes) -> dict[str, Any]:
    doc = sign_mandate(_signed(), KEY, KEY_ID)
    doc["envelope"]["signature"] = _b64url(signature)
    return doc


def test_it_runs_the_whole_file_not_a_vacuous_subset() -> None:
    assert VECTORS["algorithm"] == "EDDSA"
    assert VECTORS["schema"] == "eddsa_verify_schema_v1.json"
    assert len(CASES) == VECTORS["numberOfTests"]
    assert len(CASES) > 100
    assert len({case["tc_id"] for case in CASES}) == len(CASES)
    results = Counter(case["result"] for case in CASES)
    assert set(results) == set(POLICY)
    assert results["valid"] > 50 and results["invalid"] > 50
    for case in CASES:
        assert case["key_info"]["type"] == "EDDSAPublicKey"
        assert case["key_info"]["curve"] == "edwards25519"


def test_it_knows_every_kind_of_acceptable_vector() -> None:
    """A new kind of "acceptable" vector in an updated file must be a decision, not a default."""
    flags = {flag for case in CASES if case["result"] == "acceptable" for flag in case["flags"]}
    assert flags == ACCEPTABLE_FLAGS


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_it_gives_the_vectors_answer(case: dict[str, Any]) -> None:
    expected = POLICY[case["result"]]
    accepted = verify_ed25519(case["public_key"], case["msg"], case["sig"])
    assert accepted is expected, f"{case['comment']} ({', '.join(case['flags'])})"


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_it_refuses_a_key_of_the_wrong_length_without_raising(length: int) -> None:
    valid = next(case for case in CASES if case["result"] == "valid")
    key = (valid["public_key"] * 2)[:length]
    assert verify_ed25519(key, valid["msg"], valid["sig"]) is False


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if len(case["sig"]) != 64],
    ids=_case_id,
)
def test_it_refuses_a_wrong_length_vector_signature_in_a_mandate(case: dict[str, Any]) -> None:
    encoded = _b64url(case["sig"])
    with pytest.raises(MandateError) as decoded:
        _decode_signature(encoded)
    assert decoded.value.code == "bad_signature"
    with pytest.raises(MandateError) as verified:
        _verify(_with_signature(case["sig"]), case["public_key"])
    assert verified.value.code == "bad_signature"
    assert verified.value.field == "envelope.signature"


def test_it_accepts_the_untouched_mandate_the_attacks_start_from() -> None:
    doc = sign_mandate(_signed(), KEY, KEY_ID)
    assert _verify(doc, bytes(KEY.verify_key)).mandate_id == "mnd_01K6HBK7MK753DH3YBX4NVCYTT"


def test_it_refuses_a_mandate_whose_s_was_pushed_past_the_group_order() -> None:
    """Wycheproof's SignatureMalleability shape on a real mandate: (R, S + L) is the same
    point equation, so a lenient verifier would accept a second spelling of one signature."""
    doc = sign_mandate(_signed(), KEY, KEY_ID)
    signature = base64.urlsafe_b64decode(doc["envelope"]["signature"] + "==")
    s = int.from_bytes(signature[32:], "little")
    malleated = signature[:32] + (s + L).to_bytes(32, "little")
    with pytest.raises(MandateError) as refused:
        _verify(_with_signature(malleated), bytes(KEY.verify_key))
    assert refused.value.code == "bad_signature"


def test_it_refuses_the_universal_forgery_under_a_small_order_key() -> None:
    """With the neutral point as key, (R = neutral, S = 0) meets S*B = R + h*A for every
    message; an agent key of small order must never verify anything."""
    forged = IDENTITY + bytes(32)
    with pytest.raises(MandateError) as refused:
        _verify(_with_signature(forged), IDENTITY)
    assert refused.value.code == "bad_signature"
    assert verify_ed25519(IDENTITY, b"any message at all", forged) is False
