"""Codes as a merchant reads them: one table per code set, and the refund's one-line labels.

The refund core, the review pages and the emails all name refunds the same way, so these live
below every one of them (no import of ``refunds.review``). Pure apart from the model enums.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from typing import Any

from policies.catalog import TEMPLATES, rule_title  # noqa: F401  (re-exported)
from policies.rules import ACTION_LABELS, MODE_LABELS
from refunds.models import Refund, RefundOrigin, RefundStatus
from sill.money import Money, MoneyError, format_money
from sill.outcomes import OUTCOME_LABELS, humanize, outcome_label  # noqa: F401  (re-exported)
from sill.rails import base as rails

# The agent's reason codes (the seed's refund request).
REASON_LABELS: dict[str, str] = {
    "requested_by_customer": "Requested by customer",
    "defective": "Defective",
    "not_received": "Not received",
    "wrong_item": "Wrong item",
    "other": "Other",
}


def action_label(action: str) -> str:
    """A rule's action (policies.engine) as the decider reads it, as the Rules page names it."""
    return ACTION_LABELS.get(action, humanize(action)) if action else ""


def labelled_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """A fired rule (``{"id", "action", "mode"}``) with ``title`` and ``action_label``."""
    mode = str(rule.get("mode") or "")
    return {
        **rule,
        "title": rule_title(str(rule.get("id") or "")),
        "action_label": action_label(str(rule.get("action") or "")),
        "mode_label": MODE_LABELS.get(mode, humanize(mode)),
    }


# ``Refund.status``, as the refund pages name it.
STATUS_LABELS: dict[str, str] = {status.value: str(status.label) for status in RefundStatus}


# A refund made at the rail outside Sill (``ExternalRefund.status``): the rail's own state.
RAIL_REFUND_STATE_LABELS: dict[str, str] = {
    "pending": "Pending",
    # Stripe: the buyer must give their bank details before the money can be sent.
    "requires_action": "Waiting for the buyer",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "canceled": "Cancelled",
}


def rail_refund_state_label(state: str) -> str:
    """A rail refund's state in words; a state Sill has no words for, humanized."""
    return RAIL_REFUND_STATE_LABELS.get(state) or humanize(state)


def refund_status_label(refund: Refund) -> str:
    """``refund``'s status in words, alike on its page, the refund list and its CSV: a refund
    the rail reported failed after it was settled is "Failed after settlement" (its money
    moved, then came back), not "Failed" as one that never moved money."""
    if refund.status == RefundStatus.FAILED and refund.reversed_at is not None:
        return "Failed after settlement"
    return STATUS_LABELS.get(refund.status, refund.status)


def refused_approval(outcome_code: str) -> str:
    """Why Sill refused a person's approval of a held refund that closed with ``outcome_code``
    (``refunds.review.decisions.approve_refund``: a dispute, less left, the rail off), in words
    ("the charge is disputed"); "" for the other ways a person closes one, their rejection, or
    their decision coming after the 24 hours."""
    if outcome_code in ("", "rejected_by_reviewer", "expired"):
        return ""
    label = outcome_label(outcome_code)
    return label[:1].lower() + label[1:]


def refund_outcome_label(refund: Refund) -> str:
    """``refund``'s outcome in words; a person's rejection names them when Sill knows who
    (``Rejected by owner@roasters.example``; load ``decided_by`` with the refund)."""
    if refund.outcome_code == "rejected_by_reviewer" and refund.decided_by is not None:
        return f"Rejected by {refund.decided_by.get_username()}"
    return outcome_label(refund.outcome_code)


def outcome_words(refund: Refund) -> tuple[str, str]:
    """Why ``refund`` failed (or needs attention), as the order page, the refund page and the
    held page say it: Sill's words for its outcome ("Declined by the rail"), and apart the
    rail's own message when it says more ("mock rail: the refund was declined"), else ""."""
    attention = refund.status == RefundStatus.NEEDS_ATTENTION
    return failure_words(refund.outcome_code, refund.failure_message, attention=attention)


def failure_words(code: str, message: str, *, attention: bool = False) -> tuple[str, str]:
    """:func:`outcome_words` from an outcome ``code`` and the rail's ``message`` (as a refund
    keeps them, or as its settlement or needs-attention record does); ``attention``: the
    refund needs attention, and without a code it is the rail's answer that was lost."""
    unknown = "The rail's answer was lost" if attention else "The rail gave no reason"
    what = outcome_label(code) or unknown
    return what, message if message != what else ""


def failure_line(what: str, detail: str) -> str:
    """:func:`outcome_words` on one line: ``Declined by the rail. mock rail: the refund was
    declined``; Sill's words alone when the rail said nothing more."""
    return f"{what}. {detail}" if detail else what


def rejection_words(refund: Refund) -> str:
    """Why ``refund`` ended as it did: its outcome's label, and for an agent's refund or credit
    rejected at decision the refusal in full that Sill kept as its note (an agent writes no
    note of its own): ``The currencies do not match: Order #1042 was paid in EUR…``."""
    label = refund_outcome_label(refund)
    said = refund.note if refund.origin == RefundOrigin.AGENT else ""
    if said and refund.status == RefundStatus.REJECTED:
        return f"{label}: {said}" if label else said
    return label


def rail_label(rail: str) -> str:
    """The rail's name as merchants know it (``Stripe``, ``Mock``); a dash when there is none
    (a request rejected before its original was found)."""
    return rails.rail_label(rail) if rail else "—"


def buyer_label(name: str, email: str) -> str:
    """``Ada Lovelace (ada@example.com)``; whichever of the two is known."""
    if name and email:
        return f"{name} ({email})"
    return name or email or "the buyer"


def money_confirmation(*, amount: Money, buyer: str, rail: str, email: str = "") -> str:
    """The one sentence shown before money moves: amount, buyer, rail, and that the buyer is
    emailed (Sill's confirmation, ``refunds.send_confirmation``, once the rail has refunded)."""
    told = (
        f"Sill emails {email} a confirmation once the refund goes through"
        if email
        else "the order has no email address, so nobody is emailed"
    )
    return (
        f"Refund {format_money(amount)} to {buyer} on {rail_label(rail)}? The money goes back "
        f"to the original payment, and {told}. This cannot be undone."
    )


def reason_label(refund: Refund) -> str:
    if refund.reason_label:
        return refund.reason_label
    if refund.reason_code:
        return REASON_LABELS.get(refund.reason_code, humanize(refund.reason_code))
    return "No reason given"


def credit_confirmation(*, amount: Money, customer: str, email: str = "") -> str:
    """The sentence shown before a customer-balance credit moves money."""
    told = (
        f"Sill emails {email} once it is credited"
        if email
        else "the customer has no email address, so nobody is emailed"
    )
    return (
        f"Credit {format_money(amount)} to {customer}'s Stripe balance? Their next invoices "
        f"draw on it, and {told}. This cannot be undone."
    )


def money_words(refund: Refund) -> tuple[str, str]:
    """``("refund", "refunded")``, or ``("credit", "credited")`` for a customer credit: what
    pages and emails call it and what happens to the money."""
    return ("credit", "credited") if refund.is_credit else ("refund", "refunded")


def attention_words(refund: Refund) -> str:
    """What is known of ``refund`` while it needs attention, as a clause: the rail made it, by
    the id Sill kept, and Sill could not record it (``exceeds_charge_at_rail``), as ``Mock made
    the refund of ¥10,000 (re_1), but Sill could not record it``; else ``the rail may have made
    the refund of ¥10,000 and has not confirmed it``."""
    noun, _done = money_words(refund)
    what = f"the {noun} of {format_money(refund.amount)}"
    if refund.provider_refund_id:
        return (
            f"{rail_label(refund.rail)} made {what} ({refund.provider_refund_id}), "
            "but Sill could not record it"
        )
    return f"the rail may have made {what} and has not confirmed it"


def refund_headline(refund: Refund) -> str:
    """``Refund request · Wrong item · up to $89.00`` (the seed's Held orders headline): "up
    to" only while an agent's request waits for its decision (what its mandate allows, at
    most). A staff member asked for an exact amount, and once decided, failed or settled, the
    amount is the refund's own: ``Staff refund · Defective · ¥890``."""
    if refund.is_credit:
        return f"Customer credit · {reason_label(refund)} · {format_money(refund.amount)}"
    agent = refund.origin == RefundOrigin.AGENT
    kind = "Refund request" if agent else "Staff refund"
    up_to = "up to " if agent and refund.status == RefundStatus.HELD else ""
    return f"{kind} · {reason_label(refund)} · {up_to}{format_money(refund.amount)}"


def refund_subject(refund: Refund) -> str:
    """An email subject's words for ``refund``: its headline and the order it refunds
    (``Refund request · Wrong item · up to $89.00 for order #1042``), so two refunds of the
    same amount tell apart in an inbox; a credit (no order) is its headline."""
    order = None if refund.is_credit else refund.order
    headline = refund_headline(refund)
    return f"{headline} for order #{order.number}" if order is not None else headline


def requester_label(refund: Refund) -> str:
    # A null foreign key reads as None without a query, as the ``_id`` test did.
    if refund.agent is not None:
        return refund.agent.agent_id
    if refund.requested_by is not None:
        return refund.requested_by.get_username()
    return "—"


def requester_words(refund: Refund) -> str:
    """Who asked for ``refund`` as the pages name them: an agent by the name the merchant gave
    it, ``Test shopper (agent)`` (its id when it has none); a person by their login."""
    if refund.agent is not None:
        return f"{refund.agent.name or refund.agent.agent_id} (agent)"
    return requester_label(refund)


def percent_text(value: Decimal) -> str:
    """A percentage as Sill writes it, with no space before the sign and no trailing zeros
    (``Decimal("33.30")`` → ``33.3%``, ``Decimal("100")`` → ``100%``)."""
    return f"{value.normalize():f}%"


def deadline_text(at: datetime, zone: tzinfo | None = None) -> str:
    """``Mar 4, 12:30 EST``: a held refund's deadline in the emails, Slack and refusal
    messages, in ``zone`` (the site's; UTC without one) with its abbreviation."""
    local = at.astimezone(zone or UTC)
    return f"{local:%b} {local.day}, {local:%H:%M} {local.tzname() or 'UTC'}"


def fact_label(key: str) -> str:
    """A policy fact's name as words: ``orderTotalUsd`` → ``Order total USD``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[a-z])(?=[0-9])", " ", key)
    words = words.replace("_", " ").lower()
    words = re.sub(r"\busd\b", "USD", words)
    return words[:1].upper() + words[1:]


def fact_value(key: str, value: Any, currency: str | None) -> str:
    """A policy fact's value as words; amounts (minor units) in their currency."""
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if value is None:
        return "unknown"
    lowered = key.lower()
    if isinstance(value, int) and ("amount" in lowered or "total" in lowered):
        money_currency = "USD" if "usd" in lowered else currency
        if money_currency:
            try:
                return format_money(Money(value, money_currency))
            except MoneyError:
                pass
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
