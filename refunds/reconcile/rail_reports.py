"""What a rail reports about Sill's own refunds after the fact: late failures.

A webhook or a reconciliation read hands over the rail's state of a refund whose metadata
names one of Sill's (``sill.orders.outside.report_own_refund``). Only one report changes
Sill's books here: a refund Sill settled that the rail now says failed or was canceled is
reversed (:func:`refunds.services.reverse_settled_refund`). A refund still being executed
needs nothing: its execution records the rail's answer for the idempotency key. Nothing
here starts a money movement.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.urls import reverse

from refunds.labels import refund_headline
from refunds.models import RESERVED_STATUSES, Refund, RefundStatus
from refunds.review.failures import send_once, told
from refunds.review.notifications import DECIDERS
from refunds.services import reverse_settled_refund
from sill.accounts.notices import MessageRefused, email_members
from sill.orders.models import Charge
from sill.rails.base import RailRefund, rail_label

logger = logging.getLogger(__name__)

# Rail refund states that mean no money went back to the buyer.
FAILED_STATES = frozenset({"failed", "canceled"})


def apply_own_refund_report(charge: Charge, reported: RailRefund, event_id: str) -> str:
    """Act on the rail's state of one of Sill's refunds of ``charge``; returns what was done."""
    refund = Refund.objects.filter(pk=reported.sill_refund_id, charge=charge).first()
    if refund is None:
        return f"Sill's own refund {reported.sill_refund_id}, not found on this charge"
    if reported.status not in FAILED_STATES:
        return f"Sill's own refund {refund.id} ({reported.status} at the rail)"
    if refund.status in RESERVED_STATUSES:
        return f"Sill's own refund {refund.id}: its execution records the rail's answer"
    if refund.status != RefundStatus.SUCCEEDED:
        return f"Sill's own refund {refund.id}: already {refund.status} in Sill"
    if refund.provider_refund_id != reported.provider_refund_id:
        # Sill settled another provider refund for this key: reconciliation shows the pair.
        return f"Sill's own refund {refund.id} settled as {refund.provider_refund_id}; unchanged"
    why = reported.failure_reason.replace("_", " ") if reported.failure_reason else ""
    message = (
        f"{rail_label(refund.rail)} reported that this refund {reported.status} after it was "
        "settled" + (f" ({why})" if why else "") + ": the money went back to you, not to the "
        "buyer, and it is refundable again."
    )
    reversed_now = reverse_settled_refund(
        refund_id=refund.id,
        provider_refund_id=reported.provider_refund_id,
        message=message,
        source=event_id,
    )
    if not reversed_now:
        return f"Sill's own refund {refund.id}: already reversed"
    return f"Sill's own refund {refund.id}: failed after settlement, reversed"


def notify_reversed(*, refund_id: str) -> bool:
    """Email the owners and admins that a settled refund failed at the rail, once: each their
    own message (one refused address keeps nobody else from hearing). A task delivered twice
    sends one email; one the mail server could not take (down: an ``OSError``) is sent by the
    task's retry. A refusal of every message is logged (the error's class, the refund's id)
    and answered False, not raised: the task retries an outage only."""
    refund = Refund.objects.select_related("site", "order").get(pk=refund_id)
    if refund.reversed_at is None:
        return False
    try:
        return send_once(f"{refund_id}:reversed", lambda: _email_reversed(refund))
    except MessageRefused as refusal:
        # Only the class: the server's error carries the addresses and its reply.
        logger.warning(
            "refund %s: failed-after-settlement email refused (%s); not sent",
            refund_id,
            refusal.kind,
        )
        return False


def _email_reversed(refund: Refund) -> bool:
    order = refund.order
    base = (settings.SILL_BASE_URL or "").rstrip("/")
    lines = [
        f"A refund on {refund.site.name} that Sill had settled failed at "
        f"{rail_label(refund.rail)}: the buyer did not get the money back.",
        "",
        refund_headline(refund),
        f"Order: #{order.number}" if order else "",
        f"What happened: {refund.failure_message}",
        "",
        "The amount is refundable again. Check with the buyer (their card may be closed) and "
        "refund again, or another way, from the order page:",
        base + reverse("orders:detail", args=[refund.order_id]) if order else base,
    ]
    return told(
        refund,
        notice="failed-after-settlement",
        delivery=email_members(
            site_id=refund.site_id,
            notice=f"refund-reversed:{refund.pk}",
            subject=f"[Sill] Refund failed after settlement: {refund_headline(refund)}",
            lines_for={role: lines for role in DECIDERS},
        ),
    )
