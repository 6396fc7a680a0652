"""Agent fixtures: a registered key, and a signer that builds real mandate bodies."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from nacl.signing import SigningKey

from refunds.agent.mandates import canonical_json, sign_mandate
from sill.accounts.models import Agent, AgentKey, Site
from sill.ids import new_ulid

KEY_ID = "test-2026-11"


@pytest.fixture
def signing_key() -> SigningKey:
    return SigningKey(bytes(range(1, 33)))


@pytest.fixture
def agent_key(agent: Agent, signing_key: SigningKey) -> AgentKey:
    return AgentKey.objects.create(
        agent=agent,
        key_id=KEY_ID,
        public_key=bytes(signing_key.verify_key),
        valid_from=datetime(2026, 1, 1, tzinfo=UTC),
    )


@pytest.fixture
def mock_rail(site: Site):
    from sill.rails.registry import ensure_mock_rail

    return ensure_mock_rail(site)


def refund_intent(original: str, **overrides: Any) -> dict[str, Any]:
    intent = {
        "action": "request_refund",
        "merchant": "roasters.example",
        "original_mandate_id": original,
        "reason_code": "wrong_item",
        "scope": "full",
        "max_amount": Decimal("89.00"),
        "currency": "USD",
    }
    intent.update(overrides)
    return intent


def purchase_intent(**overrides: Any) -> dict[str, Any]:
    intent = {
        "action": "purchase",
        "merchant": "roasters.example",
        "line_items": [
            {
                "sku": "NW-HB-1KG",
                "name": "House Blend",
                "quantity": 2,
                "unit_price": Decimal("24.00"),
            },
            {"sku": "NW-DRIP-01", "name": "Dripper", "quantity": 1, "unit_price": Decimal("29.00")},
            {"sku": "NW-FILT-100", "name": "Filters", "quantity": 2, "unit_price": Decimal("6.00")},
        ],
        "quoted_total": Decimal("89.00"),
        "currency": "USD",
        "buyer": {"name": "Ada Lovelace", "email": "ada@example.com"},
        "payment": {"rail": "mock", "payment_method": "pm_card_visa"},
    }
    intent.update(overrides)
    return intent


@pytest.fixture
def sign(agent_key: AgentKey, signing_key: SigningKey, site: Site) -> Callable[..., bytes]:
    """``sign(intent, **signed_overrides)`` → the request body of a fresh, valid mandate."""

    def make(intent: dict[str, Any], *, key: SigningKey | None = None, **overrides: Any) -> bytes:
        now = datetime.now(UTC).replace(microsecond=0)
        signed = {
            "mandate_id": f"mnd_{new_ulid()}",
            "site_id": site.id,
            "agent_id": agent_key.agent.agent_id,
            "issued_at": now.isoformat().replace("+00:00", "Z"),
            "expires_at": (now + timedelta(seconds=120)).isoformat().replace("+00:00", "Z"),
            "nonce": secrets.token_urlsafe(16),
            "replay_window_seconds": 120,
            "intent": intent,
        }
        signed.update(overrides)
        return canonical_json(sign_mandate(signed, key or signing_key, KEY_ID))

    return make


def post(client, body: bytes):
    return client.post("/api/v1/mandates", data=body, content_type="application/json")


from tests.localstripe import localstripe_url  # noqa: E402, F401
