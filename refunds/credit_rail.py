"""The rail side of customer-balance credits (``refunds.agent.credits`` decides them): which
rail credits, and what it is asked on every attempt (``refunds.execution``)."""

from __future__ import annotations

from refunds.models import Refund
from sill.rails.base import CreditRequest, CustomerCreditor
from sill.rails.registry import RailDisabled, rail_for

# The one rail with customer balances Sill can credit.
CREDIT_RAIL = "stripe"


def creditor_for(site_id: str) -> CustomerCreditor:
    """The site's rail that credits customer balances; ``RailDisabled`` when it has none."""
    rail = rail_for(site_id=site_id, rail=CREDIT_RAIL)
    if not isinstance(rail, CustomerCreditor):  # pragma: no cover - Stripe implements it
        raise RailDisabled("this rail cannot credit customer balances")
    return rail


def credit_request(refund: Refund) -> CreditRequest:
    """What the rail is asked, identical on every attempt of ``refund`` (a credit)."""
    customer = refund.customer
    assert customer is not None
    return CreditRequest(
        credit_id=refund.id,
        idempotency_key=refund.idempotency_key,
        amount=refund.amount,
        provider_customer_id=customer.rail_customer_id,
        # Only what never changes: a retry with the same key and other parameters is refused
        # by Stripe (idempotency_error), so nothing the merchant can edit goes in here.
        description=f"Sill credit {refund.id}",
        metadata={"sill_refund_id": refund.id},
    )
