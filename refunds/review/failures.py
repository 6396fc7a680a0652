"""Telling a site's owners and admins that a refund failed: one email per failed refund.

Once per failed refund. Two paths lead here: ``refunds.services.fail_refund`` enqueues
:func:`notify_failed` on the commit that made the refund ``failed``, and the every-minute
sweep (:func:`notify_missed_failures`, run by ``refunds.notify_missed_outcomes``) sends any the
first path missed: a message lost with the broker down or a worker killed, retries used up, a
refusal. Both claim the refund's ``failure_notified_at`` with a conditional UPDATE before
sending (one caller wins it, in any process, and a flushed cache changes nothing) and give it
back if the email cannot be sent, so a retry or the sweep sends it, to those it did not reach
(each hears once: :mod:`sill.accounts.notices`).

Each owner and admin gets a message of their own (:func:`sill.accounts.notices.email_members`):
one address the mail server refuses keeps nobody else from hearing. A refusal of every message
is not an outage: the refund waits (:func:`sill.accounts.notices.back_off`) before the sweep
tries it again, and the sweep goes on with the others. A server that is down (an ``OSError``)
is raised, for the task's retries, and ends the sweep's run.

A refund that needs attention has its own, earlier email
(``refunds.reconcile.attention.notify_attention``), and a settled refund that failed later
its own (``refunds.reconcile.rail_reports.notify_reversed``).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from refunds.labels import money_words, outcome_label, rail_label, refund_headline, refund_subject
from refunds.models import Refund, RefundStatus
from refunds.review.notifications import DECIDERS
from refunds.services import BOOKS_BEHIND_CODES
from sill.accounts.notices import Delivery, email_members, not_backing_off, send_claimed

logger = logging.getLogger(__name__)

NOTICE = "refund-failed"
# How many untold failed refunds one sweep emails about, oldest first (the rest on the next).
SWEEP_LIMIT = 500


def notify_failed(*, refund_id: str) -> bool:
    """Email the owners and admins that ``refund_id`` failed, once. False when not sent: the
    refund is not failed (or failed after settlement: that has its own email), was told, or
    the server refused every message (the claim given back, the refund waits for the sweep:
    not raised, so the task does not send it again at once). A server that is down is
    raised, the claim given back. Only the error's class and the refund's id are logged."""
    claimed = Refund.objects.filter(
        pk=refund_id,
        status=RefundStatus.FAILED,
        reversed_at__isnull=True,
        failure_notified_at__isnull=True,
    ).update(failure_notified_at=timezone.now())
    if claimed != 1:
        return False
    refund = Refund.objects.select_related("site", "order", "agent", "requested_by").get(
        pk=refund_id
    )
    return send_claimed(
        notice=f"{NOTICE}:{refund.pk}",
        what=f"refund {refund.pk}: failure email",
        send=lambda: _email(refund),
        give_back=lambda: Refund.objects.filter(pk=refund.pk).update(failure_notified_at=None),
        log=logger,
    )


def notify_missed_failures() -> int:
    """The sweep: email the owners and admins of each failed refund they were not told of;
    how many were told. A refund whose email the server refused is skipped while it waits
    (it neither goes first nor uses up the limit); a mail server that is down ends the run,
    raised, leaving the rest untold for the next."""
    untold = (
        Refund.objects.filter(
            status=RefundStatus.FAILED, reversed_at__isnull=True, failure_notified_at__isnull=True
        )
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    )
    due = not_backing_off(untold.iterator(chunk_size=SWEEP_LIMIT), notice=NOTICE, limit=SWEEP_LIMIT)
    return sum(notify_failed(refund_id=pk) for pk in due)


def _email(refund: Refund) -> Delivery:
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
    elif refund.outcome_code in BOOKS_BEHIND_CODES:
        # The rail refused because it holds a refund (or dispute) Sill had not recorded: the
        # buyer may well have the money back already; Sill reads the payment in now.
        rail = rail_label(refund.rail)
        opening = (
            f"A refund on {refund.site.name} was refused by {rail}: nothing moved through Sill, "
            f"but {rail} already holds a refund or dispute of this payment made outside Sill "
            f"(in {rail}'s dashboard, say), which Sill is reading in now."
        )
        next_step = (
            "Check the order page (its Transactions tab lists refunds made outside Sill) before "
            "refunding again, so the buyer is not paid twice:"
        )
        link = base + reverse("orders:detail", args=[refund.order_id]) if order else base
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
        *([f"Order: #{order.number} ({order.buyer_name or order.buyer_email})"] if order else []),
        f"Why: {what}.",
        *([f"The rail said: {refund.failure_message}"] if refund.failure_message else []),
        "",
        next_step,
        link,
    ]
    return warn_if_nobody_told(
        refund,
        notice="failure",
        delivery=email_members(
            site_id=refund.site_id,
            notice=f"{NOTICE}:{refund.pk}",
            subject=f"[Sill] {money_words(refund)[0].capitalize()} failed: "
            f"{refund_subject(refund)}",
            lines_for={role: lines for role in DECIDERS},
        ),
    )


def warn_if_nobody_told(refund: Refund, *, notice: str, delivery: Delivery) -> Delivery:
    """``delivery``, logged (by the ids) when the site had nobody to tell of ``refund``'s
    ``notice``: the claim is kept, as there is nobody a retry would reach. A recipient the
    server refused is logged by :func:`sill.accounts.notices.send_claimed`."""
    if not delivery.told:
        logger.warning(
            "refund %s: no %s email; site %s has no owner or admin",
            refund.id,
            notice,
            refund.site_id,
        )
    return delivery
