"""Held refunds for the held-review tests, made the way the pipeline makes them.

Until the policy engine can hold a refund through the agent API, ``hold_refund`` writes what
``refunds.services.decide_and_open`` writes for ``require_approval``: a refund row with
decision ``escalated``, status ``held``, ``expires_at = held_at + HOLD_FOR``, the rules and
facts, and a signed ``escalated`` audit record whose hash is the refund's ``decision_hash``.
It uses only the model and ``append_record``, so it keeps working once the engine lands.

This module holds no tests; the ``test_`` prefix only keeps it with the held-review files.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from audit.services import append_record
from refunds.models import Decision, Mandate, MandateAction, Refund, RefundOrigin, RefundStatus
from refunds.services import HOLD_FOR, charged_charge, refund_body
from sill.accounts.models import Agent
from sill.ids import new_ulid
from sill.orders.models import Order

HOLDING_RULES = [{"id": "r07", "action": "require_approval", "mode": "enforced"}]


def agent_mandate(agent: Agent, *, now: datetime | None = None) -> Mandate:
    """A stored refund mandate of ``agent`` (what intake keeps after verifying one)."""
    now = now or timezone.now()
    raw = secrets.token_bytes(16)
    return Mandate.objects.create(
        site=agent.site,
        agent=agent,
        mandate_id=f"mnd_{new_ulid()}",
        key_id="test-key",
        nonce=secrets.token_urlsafe(16),
        action=MandateAction.REQUEST_REFUND,
        raw=raw,
        body_sha256=hashlib.sha256(raw).hexdigest(),
        issued_at=now,
        expires_at=now + HOLD_FOR,
    )


def hold_refund(
    *,
    order: Order,
    agent: Agent | None = None,
    requested_by: Any | None = None,
    amount_minor: int | None = None,
    reason_code: str = "wrong_item",
    reason_label: str = "",
    rules: list[dict[str, str]] | None = None,
    facts: dict[str, Any] | None = None,
    held_at: datetime | None = None,
    with_mandate: bool = False,
) -> Refund:
    """A refund of ``order`` held for review, by ``agent`` or by the user ``requested_by``."""
    charge = charged_charge(order)
    assert charge is not None, "hold_refund needs a charged order"
    held_at = held_at or timezone.now()
    rules = HOLDING_RULES if rules is None else rules
    amount = charge.remaining.amount_minor if amount_minor is None else amount_minor
    facts = (
        {
            "refundAmount": amount,
            "currency": order.currency,
            "customerRefundCount30d": 0,
            "customerOrderCount": 3,
            "agentPlacedOriginal": bool(agent and order.placed_by_agent_id == agent.pk),
        }
        if facts is None
        else facts
    )
    with transaction.atomic():
        refund = Refund.objects.create(
            site=order.site,
            order=order,
            charge=charge,
            origin=RefundOrigin.AGENT if agent is not None else RefundOrigin.STAFF,
            agent=agent,
            mandate=agent_mandate(agent, now=held_at)
            if agent is not None and with_mandate
            else None,
            requested_by=requested_by,
            amount_minor=amount,
            currency=order.currency,
            rail=charge.rail,
            decision=Decision.ESCALATED,
            status=RefundStatus.HELD,
            reason_code=reason_code,
            reason_label=reason_label,
            rules=rules,
            facts=facts,
            expires_at=held_at + HOLD_FOR,
        )
        Refund.objects.filter(pk=refund.pk).update(created_at=held_at)
        record = append_record(
            site=order.site,
            kind="escalated",
            body=refund_body(
                refund,
                decision="escalated",
                policy_version="test-hold",
                rules=rules,
                facts=facts,
                auto_refund=False,
                reviewer=None,
                decided_at=held_at.isoformat(),
                expires_at=refund.expires_at.isoformat(),
            ),
        )
        refund.decision_hash = record.hash
        refund.save(update_fields=["decision_hash", "updated_at"])
    refund.refresh_from_db()
    return refund


@pytest.fixture
def original(make_order, agent, mock_rail) -> Order:
    """A paid $89.00 order the agent placed, on the mock rail."""
    return make_order(
        total="89.00", placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"
    )


@pytest.fixture
def held(original, agent) -> Refund:
    """The seed's case: the agent's full refund of the $89.00 order, held by r07."""
    return hold_refund(order=original, agent=agent, with_mandate=True)
