"""The JSON objects the agent API answers with (DESIGN.md "Agent API contract")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from audit.models import AuditRecord
from audit.receipts import receipt_for
from refunds.models import Mandate, Refund
from sill.money import Money
from sill.orders.models import ChargeStatus, Order

# Keyed by plain str: that is what a loaded ``Charge.status`` holds.
_PURCHASE_STATUS: dict[str, str] = {
    ChargeStatus.PENDING: "processing",
    ChargeStatus.SUCCEEDED: "succeeded",
    ChargeStatus.FAILED: "failed",
}


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def refund_payload(mandate: Mandate, refund: Refund | None) -> dict[str, Any]:
    if refund is None:  # pragma: no cover - every refund mandate stores a refund row
        return {"mandate_id": mandate.mandate_id, "refund_id": None, "status": "processing"}
    return {
        "mandate_id": mandate.mandate_id,
        "refund_id": refund.id,
        "decision": refund.decision,
        "status": refund.status,
        "reason": refund.outcome_code or None,
        "amount": Money(refund.amount_minor, refund.currency).major_str(),
        "currency": refund.currency,
        "rail": refund.rail or None,
        "rules": list(refund.rules or []),
        "expires_at": _iso(refund.expires_at),
        "receipt": _receipt(refund),
    }


def _receipt(refund: Refund) -> dict[str, str] | None:
    """Sill's signed statement of the decision (audit/receipts.py); None before it exists."""
    if not refund.decision_hash:
        return None
    # The record just written by this request (refunds.services.record_decision), or read.
    record = getattr(refund, "decision_record", None)
    if record is None or record.hash != refund.decision_hash:
        record = AuditRecord.objects.filter(
            site_id=refund.site_id, hash=refund.decision_hash
        ).first()
    return receipt_for(record) if record is not None else None


def purchase_payload(mandate: Mandate, order: Order | None) -> dict[str, Any]:
    charge = order.charges.all()[0] if order is not None and order.charges.all() else None
    reason: str | None
    if order is None:
        status, decision, reason = "rejected", "rejected", "original_not_charged"
    elif charge is None:
        status, decision, reason = "rejected", "rejected", "rail_disabled"
    else:
        status = _PURCHASE_STATUS[charge.status]
        decision, reason = "approved", (charge.failure_message and "charge_failed") or None
    return {
        "mandate_id": mandate.mandate_id,
        "order_id": order.id if order is not None else None,
        "decision": decision,
        "status": status,
        "reason": reason,
        "amount": order.total.major_str() if order is not None else None,
        "currency": order.currency if order is not None else None,
        "rail": charge.rail if charge is not None else None,
        "rules": [],
        "expires_at": None,
        # A purchase is not a refund decision: Sill signs receipts for refund decisions.
        "receipt": None,
    }
