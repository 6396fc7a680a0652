"""Decision receipts: Sill's signed statement, for the agent, of what it decided.

A receipt is ``{"statement": "<JSON text>", "key_id": "sill-…", "signature": "<base64url>"}``.
``statement`` is the RFC 8785 text of ``{"type": "sill-decision-receipt-v1", "site_id",
"mandate_id", "mandate_sha256", "refund_id", "decision", "amount_minor", "currency",
"recorded_at", "audit_seq", "audit_leaf_hash", "audit_record_hash"}`` taken from the signed
decision record; ``signature`` is Ed25519 over ``b"sill-receipt-v1:" + statement`` with the
audit key ``key_id`` (``/.well-known/sill-audit-keys.json``). The agent keeps the text as
received, so checking it needs only PyNaCl and the published key (:func:`verify_receipt`
shows how); ``audit_seq`` and ``audit_leaf_hash`` find the record in the site's log, whose
inclusion proof (``/audit/<site>/proof/inclusion?seq=N``) ties it to a signed checkpoint.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import nacl.exceptions
import nacl.signing

from audit import chain, keys, merkle
from audit.models import AuditRecord

RECEIPT_TYPE = "sill-decision-receipt-v1"
DOMAIN = b"sill-receipt-v1:"


def receipt_for(record: AuditRecord) -> dict[str, str]:
    """The receipt of the decision ``record`` (a decision kind), signed now."""
    payload = json.loads(record.payload)
    body = payload["body"]
    statement = chain.canonical(
        {
            "type": RECEIPT_TYPE,
            "site_id": record.site_id,
            "mandate_id": body.get("mandate_id"),
            "mandate_sha256": body.get("mandate_sha256"),
            "refund_id": body.get("refund_id"),
            "decision": body.get("decision"),
            "amount_minor": body.get("amount_minor"),
            "currency": body.get("currency"),
            "recorded_at": payload["recorded_at"],
            "audit_seq": record.seq,
            "audit_leaf_hash": base64.b64encode(merkle.record_leaf_hash(record.payload)).decode(),
            "audit_record_hash": record.hash,
        }
    )
    key_id, signing_key = keys.signing_key()
    signature = signing_key.sign(DOMAIN + statement).signature
    return {
        "statement": statement.decode("utf-8"),
        "key_id": key_id,
        "signature": chain.b64url_encode(signature),
    }


def verify_receipt(receipt: dict[str, Any], public_key: bytes) -> dict[str, Any]:
    """What a receipt states, if ``public_key`` signed it; ``ValueError`` otherwise.

    Needs nothing of Sill: this is the whole check an agent runs.
    """
    statement, signature = receipt.get("statement"), receipt.get("signature")
    if not isinstance(statement, str) or not isinstance(signature, str):
        raise ValueError("a receipt has a statement and a signature")
    try:
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        nacl.signing.VerifyKey(public_key).verify(DOMAIN + statement.encode("utf-8"), raw)
    except (ValueError, nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        raise ValueError("the receipt's signature does not verify") from None
    stated: dict[str, Any] = json.loads(statement)
    if stated.get("type") != RECEIPT_TYPE:
        raise ValueError("not a Sill decision receipt")
    return stated
