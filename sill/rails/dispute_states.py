"""A rail's dispute status words, as Sill's ``DisputeStatus``.

An unknown word is open: refunding a disputed charge pays the buyer twice, so only a word
that says the dispute is over (won or lost) lets a refund through.
"""

from __future__ import annotations

from sill.orders.models import DisputeStatus

_STATES: dict[str, DisputeStatus] = {
    # Stripe (https://docs.stripe.com/api/disputes/object#dispute_object-status), and
    # Shopify's ShopifyPaymentsDisputeStatus in lower case, which uses the same words.
    "warning_needs_response": DisputeStatus.NEEDS_RESPONSE,
    "needs_response": DisputeStatus.NEEDS_RESPONSE,
    "warning_under_review": DisputeStatus.UNDER_REVIEW,
    "under_review": DisputeStatus.UNDER_REVIEW,
    "won": DisputeStatus.WON,
    # An inquiry closed without a chargeback, or one prevented: no money was taken back.
    "warning_closed": DisputeStatus.WON,
    "prevented": DisputeStatus.WON,
    "lost": DisputeStatus.LOST,
    # Shopify: the merchant accepted the chargeback, or refunded the charge instead.
    "accepted": DisputeStatus.LOST,
    "charge_refunded": DisputeStatus.LOST,
    # PayPal (Customer Disputes v1 ``status``; sill.rails.paypal.events adds a resolved
    # dispute's ``dispute_outcome.outcome_code`` after a colon, since RESOLVED alone says
    # nothing about who won). WAITING_FOR_BUYER_RESPONSE: the seller answered, still open.
    "open": DisputeStatus.NEEDS_RESPONSE,
    "waiting_for_seller_response": DisputeStatus.NEEDS_RESPONSE,
    "waiting_for_buyer_response": DisputeStatus.UNDER_REVIEW,
    "resolved:resolved_seller_favour": DisputeStatus.WON,
    "resolved:canceled_by_buyer": DisputeStatus.WON,
    "resolved:denied": DisputeStatus.WON,
    # PayPal paid the buyer from its own funds: the merchant keeps the money.
    "resolved:resolved_with_payout": DisputeStatus.WON,
    "resolved:resolved_buyer_favour": DisputeStatus.LOST,
    "resolved:accepted": DisputeStatus.LOST,
    # Resolved, outcome not given: over, and the buyer may have been paid back.
    "resolved": DisputeStatus.LOST,
}


def dispute_status(word: str) -> DisputeStatus:
    word = word.lower()
    if word in _STATES:
        return _STATES[word]
    if word.startswith("resolved:"):
        return _STATES["resolved"]  # PayPal: resolved, with an outcome Sill has no word for
    return DisputeStatus.NEEDS_RESPONSE
