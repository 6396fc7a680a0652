"""Telling a site's owners and admins that a refund failed: one email per failed refund.

``refunds.services.fail_refund`` enqueues :func:`notify_failed` on the commit that made the
refund ``failed``. ``failed`` is final and ``fail_refund`` changes a refund into it once (under
its row lock), so each failed refund is enqueued once; a task delivered twice is stopped by
an atomic claim in the cache (Redis in production), given back if the email cannot be sent
so that the task's retry sends it, to those it did not reach (each hears once:
:mod:`sill.accounts.notices`).

Each owner and admin gets a message of their own (:func:`sill.accounts.notices.email_members`):
one address the mail server refuses keeps nobody else from hearing. A refusal of every message
is logged (the error's class and the refund's id) and not retried, as the attention emails'
task does not retry one: the refund shows as failed on the dashboard and its page. A server
that is down (an ``OSError``) is raised, for the task's retries.

A refund that needs attention has its own, earlier email
(``refunds.reconcile.attention.notify_attention``), and a settled refund that failed later
its own (``refunds.reconcile.rail_reports.notify_reversed``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.urls import reverse

from refunds.labels import money_words, outcome_label, rail_label, refund_headline
from refunds.models import Refund, RefundStatus
from refunds.review.notifications import DECIDERS
from sill.accounts.notices import Delivery, MessageRefused, email_members

logger = logging.getLogger(__name__)

# Long enough to outlast any redelivery or retry of the task.
CLAIM_SECONDS = 7 * 24 * 3600


def send_once(claim: str, send: Callable[[], bool]) -> bool:
    """``send()`` unless ``claim`` was already taken (False then): an atomic claim in the
    cache, given back if ``send`` raises: the mail server is down (the task's retry sends), or
    it refused every message (:class:`MessageRefused`: nobody was told)."""
    key = f"sill:notified:{claim}"
    if not cache.add(key, 1, CLAIM_SECONDS):
        return False
    try:
        return send()
    except Exception:
        cache.delete(key)  # not sent: the retry may send it
        raise


def notify_failed(*, refund_id: str) -> bool:
    """Email the owners and admins that ``refund_id`` failed, once. False when not sent: the
    refund is not failed (or failed after settlement: that has its own email), was told, or
    the server refused every message (logged, not raised: the task retries an outage only)."""
    refund = (
        Refund.objects.select_related("site", "order", "agent", "requested_by")
        .filter(pk=refund_id, status=RefundStatus.FAILED, reversed_at__isnull=True)
        .first()
    )
    if refund is None:
        return False
    try:
        return send_once(f"{refund_id}:failed", lambda: _email(refund))
    except MessageRefused as refusal:
        # Only the class: the server's error carries the addresses and its reply.
        logger.warning("refund %s: failure email refused (%s); not sent", refund_id, refusal.kind)
        return False


def _email(refund: Refund) -> bool:
    order = refund.order
    base = (getattr(settings, "SILL_BASE_URL", "") or "").rstrip("/")
    what = outcome_label(refund.outcome_code) or "The rail refused it"
    if refund.is_credit:
        opening = (
            f"A customer credit on {refund.site.name} failed at {rail_label(refund.rail)}: "
            "nothing was credited, so the customer's balance is unchanged."
        )
        next_step = "Fix the cause if you can, then ask for the credit again. The credit:"
        link = base + reverse("refunds:detail", args=[refund.id])
    else:
        opening = (
            f"A refund on {refund.site.name} failed at {rail_label(refund.rail)}: nothing was "
            "refunded, so the buyer has not got the money back."
        )
        next_step = (
            "The amount is refundable again. Fix the cause if you can (a rail switched off, a "
            "card that is closed), then refund again from the order page:"
        )
        link = base + reverse("orders:detail", args=[refund.order_id]) if order else base
    lines = [
        opening,
        "",
        refund_headline(refund),
        f"Order: #{order.number} ({order.buyer_name or order.buyer_email})" if order else "",
        f"Why: {what}.",
        f"The rail said: {refund.failure_message}" if refund.failure_message else "",
        "",
        next_step,
        link,
    ]
    return told(
        refund,
        notice="failure",
        delivery=email_members(
            site_id=refund.site_id,
            notice=f"refund-failed:{refund.pk}",
            subject=f"[Sill] {money_words(refund)[0].capitalize()} failed: "
            f"{refund_headline(refund)}",
            lines_for={role: lines for role in DECIDERS},
        ),
    )


def told(refund: Refund, *, notice: str, delivery: Delivery) -> bool:
    """Whether anyone was told of ``refund``'s ``notice``; a recipient the server refused, or
    a site with nobody to tell, is logged (the error's class, the ids)."""
    if not delivery.told:
        logger.warning(
            "refund %s: no %s email; site %s has no owner or admin",
            refund.id,
            notice,
            refund.site_id,
        )
        return False
    if delivery.refused:
        logger.warning(
            "refund %s: %s email refused for a recipient (%s); the others were told",
            refund.id,
            notice,
            delivery.refused,
        )
    return True
