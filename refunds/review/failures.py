"""Telling a site's owners and admins that a refund failed: one email per failed refund.

``refunds.services.fail_refund`` enqueues :func:`notify_failed` on the commit that made the
refund ``failed``. ``failed`` is final and ``fail_refund`` changes a refund into it once (under
its row lock), so each failed refund is enqueued once; a task delivered twice is stopped by
an atomic claim in the cache (Redis in production), given back if the email cannot be sent
so that the task's retry sends it. A refund that needs attention has its own, earlier email
(``refunds.reconcile.attention.notify_attention``), and a settled refund that failed later
its own (``refunds.reconcile.rail_reports.notify_reversed``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.core.mail import send_mail
from django.urls import reverse

from refunds.labels import money_words, outcome_label, rail_label, refund_headline
from refunds.models import Refund, RefundStatus
from refunds.review.notifications import decider_emails

logger = logging.getLogger(__name__)

# Long enough to outlast any redelivery or retry of the task.
CLAIM_SECONDS = 7 * 24 * 3600


def send_once(claim: str, send: Callable[[], bool]) -> bool:
    """``send()`` unless ``claim`` was already taken (False then): an atomic claim in the
    cache, given back if ``send`` raises (the mail server refused: the task's retry sends)."""
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
    refund is not failed (or failed after settlement: that has its own email), or was told."""
    refund = (
        Refund.objects.select_related("site", "order", "agent", "requested_by")
        .filter(pk=refund_id, status=RefundStatus.FAILED, reversed_at__isnull=True)
        .first()
    )
    if refund is None:
        return False
    return send_once(f"{refund_id}:failed", lambda: _email(refund))


def _email(refund: Refund) -> bool:
    recipients = decider_emails(refund)
    if not recipients:
        logger.warning("refund %s failed; site %s has no owner or admin", refund.id, refund.site_id)
        return False
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
    send_mail(
        subject=f"[Sill] {money_words(refund)[0].capitalize()} failed: {refund_headline(refund)}",
        message="\n".join(line for line in lines if line is not None) + "\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )
    return True
