"""Customer-balance credits: a ``credit_customer`` mandate, decided and executed like a refund.

A credit gives money back as balance on the customer's account at the rail (Stripe's customer
balance: the customer's next invoices draw on it) instead of returning a charge. It is a
``Refund`` row of kind ``customer_credit``: no order, no charge, its ``customer`` set. It
goes through the same steps as a refund, in the same transaction shapes:

1. **Read the customer at the rail** before any transaction (a provider call never holds a
   lock): does it exist, which currency is its balance in, how old is it.
2. **Quote**: the customer must be in Sill's records for this site (``Customer`` by the rail's
   id); the credit's currency must be the customer's balance currency, or the site's currency
   when the customer has none yet — anything else is ``currency_mismatch`` (Stripe keeps one
   balance currency per customer). The amount is the agent's signed ``amount``.
3. **Decide**: the agent's refund method and caps, then the rules that apply to credits
   (``policies.credits``); held credits wait for an owner or admin like held refunds.
4. **Execute** on a worker (``refunds.execution``) as a customer balance transaction with the
   idempotency key ``sill-credit-<id>``; an ambiguous answer is recovered by looking the
   transaction up by its ``sill_credit_id`` metadata, never by a new key.

Nothing is reserved: a credit draws on no charge. Every step writes the same audit records as
a refund (decision, settlement), and the agent's answer carries the same receipt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.credits import CreditContext, decide_credit
from refunds.agent.caps import agent_cap_refusal
from refunds.agent.mandates import CreditIntent, VerifiedMandate
from refunds.credit_rail import CREDIT_RAIL, creditor_for
from refunds.locks import lock_decision_scope
from refunds.models import Decision, Mandate, Refund, RefundKind, RefundOrigin, RefundStatus
from refunds.services import open_decided, record_decision, unsaved_refund
from sill.orders.models import Customer
from sill.rails.base import CreditCustomer, RailError
from sill.rails.registry import RailDisabled


@dataclass(frozen=True)
class CustomerRead:
    """The rail's answer about the credited customer, or why it could not be had."""

    customer: CreditCustomer | None = None
    refusal: str = ""  # rail_disabled | rail_unavailable
    message: str = ""


def read_customer(verified: VerifiedMandate) -> CustomerRead:
    """Ask the rail about the intent's customer, before any transaction or lock."""
    intent = verified.intent
    assert isinstance(intent, CreditIntent)
    try:
        creditor = creditor_for(verified.site_id)
    except RailDisabled as exc:
        return CustomerRead(refusal="rail_disabled", message=exc.message)
    try:
        return CustomerRead(customer=creditor.read_credit_customer(intent.customer))
    except RailError as exc:
        return CustomerRead(refusal="rail_unavailable", message=exc.message)


def open_credit(
    *, mandate: Mandate, verified: VerifiedMandate, read: CustomerRead, now: datetime
) -> Refund:
    """Quote, decide and open the credit ``verified`` asks for, inside the caller's
    transaction after the mandate was stored; ``read`` is the rail's earlier answer."""
    intent = verified.intent
    assert isinstance(intent, CreditIntent)
    site, agent = mandate.site, mandate.agent
    base: dict[str, Any] = {
        "site": site,
        "kind": RefundKind.CUSTOMER_CREDIT,
        "origin": RefundOrigin.AGENT,
        "mandate": mandate,
        "agent": agent,
        "reason_code": intent.reason_code,
        "currency": intent.currency,
        "amount_minor": 0,
        "rail": CREDIT_RAIL,
    }

    def rejected(code: str, note: str = "", **found: Any) -> Refund:
        refund = unsaved_refund(
            **{**base, **found},
            decision=Decision.REJECTED,
            status=RefundStatus.REJECTED,
            outcome_code=code,
            note=note[:500],
        )
        return record_decision(refund=refund, outcome=None, now=now)

    if not agent.refund_enabled:
        return rejected("method_not_allowed")
    # Sill's own records first: a credit goes only to a customer this site knows.
    customer = Customer.objects.filter(site=site, rail_customer_id=intent.customer).first()
    if customer is None:
        return rejected("unknown_customer")
    lock_decision_scope(agent_id=agent.pk, customer_id=customer.pk)
    if read.refusal:
        return rejected(read.refusal, note=read.message, customer=customer)
    assert read.customer is not None
    if not read.customer.exists:
        return rejected("unknown_customer", customer=customer)
    balance_currency = read.customer.currency or site.default_currency
    if intent.currency != balance_currency:
        return rejected(
            "currency_mismatch",
            note=f"the customer's balance is in {balance_currency}",
            customer=customer,
        )
    amount = intent.amount
    found: dict[str, Any] = {"customer": customer, "amount_minor": amount.amount_minor}
    if (over := agent_cap_refusal(agent=agent, site=site, amount=amount, now=now)) is not None:
        return rejected(over, **found)
    outcome = decide_credit(
        CreditContext(
            site=site,
            amount=amount,
            agent=agent,
            reason=intent.reason_code,
            now=now,
            rail=CREDIT_RAIL,
            customer_created_at=read.customer.created_at,
        )
    )
    # Nothing is reserved: a credit draws on no charge.
    return open_decided(outcome=outcome, fields={**base, **found}, now=now, charge=None)
