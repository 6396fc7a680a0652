"""Why a refund or credit ended as it did, in words: ``Refund.outcome_code``, which the audit
records' bodies name ``reason`` (DESIGN.md "The refund pipeline"; the rails' error codes for
failures: every code a rail gives has words here, tests/refunds/test_outcome_labels.py reads
them from the rails' source).

It lives under ``sill/`` so that Activity (``audit``) says the same words as the refund pages
(``refunds.labels``) without importing ``refunds``.
"""

from __future__ import annotations

OUTCOME_LABELS: dict[str, str] = {
    "original_not_charged": "The original order was not charged",
    "already_executed": "Already refunded",
    "exceeds_refundable": "More than is still refundable",
    "scope_unsupported": "Line-item refunds are not supported",
    # Switched off, or set up so that it cannot refund this payment (no key, no Stripe beside
    # a WooCommerce store, connected to another Shopify shop or WooCommerce store than the
    # order's): the refund's own words say which.
    "rail_disabled": "The rail is off or not connected",
    "policy_denied": "Denied by a rule",
    "disputed": "The charge is disputed",
    "expired": "Expired after 24 hours",
    # An owner's or admin's rejection, in Sill or in Slack; a refund names its decider
    # (refunds.labels.refund_outcome_label).
    "rejected_by_reviewer": "Rejected by a person",
    "live_not_allowed": "Live money is switched off",
    "refund_window_passed": "The refund window has passed",
    "method_not_allowed": "This agent may not ask for refunds",
    # Its policy approved it, and the agent was switched off before the worker sent it.
    "agent_deactivated": "The agent was deactivated before it was sent",
    # Its policy approved it, and the key that signed it was revoked before the worker sent it.
    "key_revoked": "The agent's key was revoked before it was sent",
    "agent_cap_exceeded": "Over the agent's refund cap",
    "rail_declined": "Declined by the rail",
    "rail_unavailable": "The rail was unavailable",
    "rail_timeout": "The rail did not answer in time",
    "rail_pending": "The rail has not finished the refund",
    "rail_auth_failed": "The rail refused Sill's key",
    "rail_secret_unreadable": "The rail's key cannot be read",
    "rail_error": "The rail reported an error",
    "rail_throttled": "The rail asked Sill to slow down",
    "rail_unsupported": "The rail does not do this",
    "rail_cannot_look_up": "The rail could not be asked about the refund",
    "charge_pending": "The payment has not finished at the rail",
    # PayPal's CAPTURE_FULLY_REFUNDED: refunded there, perhaps outside Sill.
    "already_refunded": "Already refunded at the rail",
    "shopify_unauthorized": "Shopify refused Sill's access token",
    "woocommerce_refused": "The WooCommerce store refused it",
    "woocommerce_read_only": "The WooCommerce keys may read but not refund",
    "execution_error": "Sill hit an unexpected error",
    "not_at_rail": "The rail has no such refund",
    "failed_after_settlement": "Failed at the rail after it was settled",
    # The rail made the refund; Sill's books count its charge refunded already (outside Sill).
    "exceeds_charge_at_rail": "Refunded at the rail beyond what Sill's books allow",
    "unknown_customer": "Sill does not know this customer",
    # A credit in another currency than the customer's balance; a refund of a payment made in
    # another currency than the one Sill refunds (a Shopify order paid in the buyer's).
    "currency_mismatch": "The currencies do not match",
}


def humanize(code: str) -> str:
    """``wrong_item`` → ``Wrong item``: the fallback for a code no table knows."""
    return code.replace("_", " ").strip().capitalize()


def outcome_label(code: str) -> str:
    """``exceeds_refundable`` → "More than is still refundable"; a code no table knows (a
    rail's reason for a refund made outside Sill, ``requested_by_customer``) humanized."""
    return OUTCOME_LABELS.get(code, humanize(code)) if code else ""
