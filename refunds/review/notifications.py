"""Telling a site's owners and admins that a refund waits for them: email, and Slack if set.

Once per held refund. Two paths lead here: :func:`refunds.services.notify_hold` on the commit
that held the refund, and the every-minute sweep (:func:`notify_pending_held_refunds`) that
catches any the first path missed. Both end in :func:`notify_held_refund`, which claims the
refund's ``held_notified_at`` with a conditional UPDATE before sending (only one caller can
win it, in any process) and gives it back if the email fails, so a retry sends it (to the
deciders not told yet: each hears once, :mod:`sill.accounts.notices`) and a second path
sends nothing.

Each owner and admin gets a message of their own (:func:`sill.accounts.notices.email_members`):
one address the mail server refuses keeps nobody else from hearing. A refusal of every
message is not an outage: the refund waits before the sweep tries it again
(:func:`sill.accounts.notices.back_off`) and the sweep goes on with the others. A server that is
down (an ``OSError``) ends the sweep's run, leaving the rest for the next minute.

Slack is best effort: an incoming webhook that is down or slow (5 s timeout) is logged, never
raised, so it can neither block nor repeat the email. The Slack message carries the facts in
words, the rules that held the refund and Approve / Reject buttons (refunds/review/slack.py).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from refunds.labels import (
    action_label,
    deadline_text,
    money_words,
    refund_headline,
    refund_subject,
    requester_words,
    rule_title,
)
from refunds.models import Refund, RefundStatus
from refunds.review.decisions import deadline
from refunds.review.facts_words import fact_phrases
from refunds.review.slack import post_held_message, webhook_url
from refunds.services import HOLD_FOR
from sill.accounts.models import Role
from sill.accounts.notices import (
    Delivery,
    email_members,
    member_address,
    not_backing_off,
    send_claimed,
)

logger = logging.getLogger(__name__)

SWEEP_LIMIT = 500
# Who is told of a refund that waits for someone: those who may decide it (Cap.DECIDE_HELD,
# which both roles have alike: the same words go to each).
DECIDERS = (Role.OWNER, Role.ADMIN)
NOTICE = "held-refund"


def notify_held_refund(*, refund_id: str) -> bool:
    """Email the owners and admins (and post to Slack) about a held refund, once.

    Returns False when there is nothing to send (already notified, or no longer held) or the
    mail server refused the message to every owner and admin: the claim is given back and
    the refund waits (:func:`sill.accounts.notices.back_off`) before the sweep tries again,
    not raised, so the on-commit task does not retry it at once. A server that is down is
    raised (an ``OSError`` for SMTP), the claim given back. Only the error's class and the
    refund's id are logged, never an address or the server's reply.
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
    told = send_claimed(
        notice=f"{NOTICE}:{refund.pk}",
        what=f"held refund {refund.pk}: email",
        send=lambda: _email_deciders(refund),
        give_back=lambda: Refund.objects.filter(pk=refund.pk).update(held_notified_at=None),
        log=logger,
    )
    if not told:
        return False
    if hook := webhook_url(refund.site):
        post_held_message(url=hook, refund=refund, review_url=review_url(refund))
    return True


def pending_held_refund_ids(*, now: datetime | None = None) -> list[str]:
    """Held, unexpired refunds nobody was told about yet, oldest first, but for those waiting
    after the mail server refused their email: they neither go first nor use up the limit."""
    now = now or timezone.now()
    untold = (
        Refund.objects.filter(status=RefundStatus.HELD, held_notified_at__isnull=True)
        .filter(Q(expires_at__gt=now) | Q(expires_at__isnull=True, created_at__gt=now - HOLD_FOR))
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    )
    return not_backing_off(
        untold.iterator(chunk_size=SWEEP_LIMIT), notice=NOTICE, limit=SWEEP_LIMIT
    )


def notify_pending_held_refunds(*, now: datetime | None = None) -> int:
    """The sweep: notify every held refund that was missed; returns how many were sent. A
    refused email skips its refund; a mail server that is down ends the run, raised, leaving
    the rest untold for the next."""
    return sum(
        notify_held_refund(refund_id=refund_id) for refund_id in pending_held_refund_ids(now=now)
    )


def review_url(refund: Refund) -> str:
    base = (getattr(settings, "SILL_BASE_URL", "") or f"http://localhost:{settings.PORT}").rstrip(
        "/"
    )
    return base + reverse("refunds:held-detail", args=[refund.id])


def _credited(refund: Refund) -> str:
    customer = refund.customer if refund.is_credit else None
    if customer is None:
        return ""
    who = customer.name or customer.email or customer.rail_customer_id
    return f"Credit to: {who}'s Stripe balance (customer {customer.rail_customer_id})"


def _email_deciders(refund: Refund) -> Delivery:
    """Each owner and admin their own message; who was told (and the error's class when the
    server refused some of them). Raises what :func:`email_members` raises."""
    order = refund.order
    done = money_words(refund)[1]
    what = "A customer credit" if refund.is_credit else "A refund"
    facts = " · ".join(fact_phrases(refund.facts or {}, credit=refund.is_credit))
    about = [
        f"{what} on {refund.site.name} is waiting for an owner or admin.",
        "",
        refund_headline(refund),
        *([f"Order: #{order.number} ({order.buyer_name or order.buyer_email})"] if order else []),
        *([credited] if (credited := _credited(refund)) else []),
        f"Requested by: {requester_words(refund)}",
        "Facts: " + (facts or "none recorded"),
        "Held by: " + held_by(refund),
        "",
    ]
    before = deadline_text(deadline(refund), refund.site.zone)
    lines = [
        *about,
        f"Decide before {before}. If nobody approves it by then, it expires and nothing is {done}.",
        "",
        f"Review it: {review_url(refund)}",
    ]
    # Whoever asked for it cannot approve it (refunds.review.decisions): told so, not "decide".
    asked = refund.requested_by
    own = {}
    if asked is not None:
        own[member_address(asked)] = [
            *about,
            "You asked for it, so another owner or admin decides it (whoever asks cannot "
            f"approve). If nobody approves it before {before}, it expires and nothing is "
            f"{done}.",
            "",
            f"See it: {review_url(refund)}",
        ]
    delivery = email_members(
        site_id=refund.site_id,
        notice=f"{NOTICE}:{refund.pk}",
        subject=f"[Sill] Held for review: {refund_subject(refund)}",
        lines_for={role: lines for role in DECIDERS},
        own_lines=own,
    )
    if not delivery.told:
        logger.warning(
            "held refund %s: site %s has no owner or admin to tell", refund.id, refund.site_id
        )
    return delivery


def held_by(refund: Refund) -> str:
    """The rules that held ``refund``, by their titles and what they do."""
    rules = [
        f"{rule_title(r['id'])} ({action_label(str(r.get('action', ''))).lower()})"
        for r in refund.rules or []
        if isinstance(r, dict) and "id" in r
    ]
    return "; ".join(rules) or "the site's policy"
