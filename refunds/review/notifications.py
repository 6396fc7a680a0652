"""Telling a site's owners and admins that a refund waits for them: email, and Slack if set.

Once per held refund. Two paths lead here: :func:`refunds.services.notify_hold` on the commit
that held the refund, and the every-minute sweep (:func:`notify_pending_held_refunds`) that
catches any the first path missed. Both end in :func:`notify_held_refund`, which claims the
refund's ``held_notified_at`` with a conditional UPDATE before sending (only one caller can
win it, in any process) and gives it back if the email fails, so a retry sends it and a
second path sends nothing.

Slack is best effort: an incoming webhook that is down or slow (5 s timeout) is logged, never
raised, so it can neither block nor repeat the email. The Slack message carries the facts in
words, the rules that held the refund and Approve / Reject buttons (refunds/review/slack.py).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from refunds.labels import (
    action_label,
    deadline_text,
    money_words,
    refund_headline,
    requester_label,
    rule_title,
)
from refunds.models import Refund, RefundStatus
from refunds.review.decisions import deadline
from refunds.review.facts_words import fact_phrases
from refunds.review.slack import post_held_message, webhook_url
from refunds.services import HOLD_FOR
from sill.accounts.models import Role
from sill.accounts.notices import member_emails

logger = logging.getLogger(__name__)

SWEEP_LIMIT = 500
# Who is told of a refund that waits for someone: those who may decide it.
DECIDERS = (Role.OWNER, Role.ADMIN)


def notify_held_refund(*, refund_id: str) -> bool:
    """Email the owners and admins (and post to Slack) about a held refund, once.

    Returns False when there is nothing to send: already notified, or no longer held.
    """
    refund = (
        Refund.objects.select_related("site", "order", "agent", "requested_by", "customer")
        .filter(pk=refund_id, status=RefundStatus.HELD)
        .first()
    )
    if refund is None:
        return False
    claimed = Refund.objects.filter(
        pk=refund.pk, status=RefundStatus.HELD, held_notified_at__isnull=True
    ).update(held_notified_at=timezone.now())
    if claimed != 1:
        return False
    try:
        _email_deciders(refund)
    except Exception:
        # Not sent: give the claim back so the retry (or the next sweep) sends it.
        Refund.objects.filter(pk=refund.pk).update(held_notified_at=None)
        raise
    if hook := webhook_url(refund.site):
        post_held_message(url=hook, refund=refund, review_url=review_url(refund))
    return True


def pending_held_refund_ids(*, now: datetime | None = None) -> list[str]:
    """Held, unexpired refunds nobody was told about yet."""
    now = now or timezone.now()
    return list(
        Refund.objects.filter(status=RefundStatus.HELD, held_notified_at__isnull=True)
        .filter(Q(expires_at__gt=now) | Q(expires_at__isnull=True, created_at__gt=now - HOLD_FOR))
        .order_by("created_at", "id")
        .values_list("pk", flat=True)[:SWEEP_LIMIT]
    )


def notify_pending_held_refunds(*, now: datetime | None = None) -> int:
    """The sweep: notify every held refund that was missed; returns how many were sent."""
    return sum(
        notify_held_refund(refund_id=refund_id) for refund_id in pending_held_refund_ids(now=now)
    )


def review_url(refund: Refund) -> str:
    base = (getattr(settings, "SILL_BASE_URL", "") or f"http://localhost:{settings.PORT}").rstrip(
        "/"
    )
    return base + reverse("refunds:held-detail", args=[refund.id])


def decider_emails(refund: Refund) -> list[str]:
    """The site's owners and admins whose accounts are active: a deactivated one is locked
    out of Sill and hears nothing more of its refunds and buyers."""
    return member_emails(refund.site_id, roles=DECIDERS)


def _credited(refund: Refund) -> str:
    customer = refund.customer if refund.is_credit else None
    if customer is None:
        return ""
    who = customer.name or customer.email or customer.rail_customer_id
    return f"Credit to: {who}'s Stripe balance (customer {customer.rail_customer_id})"


def _email_deciders(refund: Refund) -> None:
    recipients = decider_emails(refund)
    if not recipients:
        logger.warning(
            "held refund %s: site %s has no owner or admin to tell", refund.id, refund.site_id
        )
        return
    order = refund.order
    done = money_words(refund)[1]
    what = "A customer credit" if refund.is_credit else "A refund"
    facts = " · ".join(fact_phrases(refund.facts or {}, credit=refund.is_credit))
    lines = [
        f"{what} on {refund.site.name} is waiting for an owner or admin.",
        "",
        refund_headline(refund),
        f"Order: #{order.number} ({order.buyer_name or order.buyer_email})" if order else "",
        _credited(refund),
        f"Requested by: {requester_label(refund)}",
        "Facts: " + (facts or "none recorded"),
        "Held by: " + held_by(refund),
        "",
        f"Decide before {deadline_text(deadline(refund), refund.site.zone)}. If nobody "
        f"approves it by then, it expires and nothing is {done}.",
        "",
        f"Review it: {review_url(refund)}",
    ]
    send_mail(
        subject=f"[Sill] Held for review: {refund_headline(refund)}",
        message="\n".join(line for line in lines if line is not None) + "\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )


def held_by(refund: Refund) -> str:
    """The rules that held ``refund``, by their titles and what they do."""
    rules = [
        f"{rule_title(r['id'])} ({action_label(str(r.get('action', ''))).lower()})"
        for r in refund.rules or []
        if isinstance(r, dict) and "id" in r
    ]
    return "; ".join(rules) or "the site's policy"
