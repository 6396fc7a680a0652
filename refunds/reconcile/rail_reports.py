"""What a rail reports about Sill's own refunds after the fact: late failures.

A webhook or a reconciliation read hands over the rail's state of a refund whose metadata
names one of Sill's (``sill.orders.outside.report_own_refund``). Only one report changes
Sill's books here: a refund Sill settled that the rail now says failed or was canceled is
reversed (:func:`refunds.services.reverse_settled_refund`), and owners and admins are told
(:func:`notify_reversed`). A refund still being executed keeps the report: its worker may hold
the rail's earlier "succeeded", and settling it under the failed id reverses it at once
(:func:`refunds.services.note_failure_at_rail`). Nothing here starts a money movement.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from refunds.labels import refund_headline, refund_subject
from refunds.models import RESERVED_STATUSES, Refund, RefundStatus
from refunds.review.failures import warn_if_nobody_told
from refunds.review.notifications import DECIDERS
from refunds.services import note_failure_at_rail
from sill.accounts.notices import Delivery, email_members, not_backing_off, send_claimed
from sill.orders.models import Charge
from sill.rails.base import RailRefund, rail_label

logger = logging.getLogger(__name__)

# Rail refund states that mean no money went back to the buyer.
FAILED_STATES = frozenset({"failed", "canceled"})

NOTICE = "refund-reversed"
# How many untold reversed refunds one sweep emails about, oldest first (the rest on the next).
SWEEP_LIMIT = 500


def apply_own_refund_report(charge: Charge, reported: RailRefund, event_id: str) -> str:
    """Act on the rail's state of one of Sill's refunds of ``charge``; returns what was done."""
    refund = Refund.objects.filter(pk=reported.sill_refund_id, charge=charge).first()
    if refund is None:
        return f"Sill's own refund {reported.sill_refund_id}, not found on this charge"
    if reported.status not in FAILED_STATES:
        return f"Sill's own refund {refund.id} ({reported.status} at the rail)"
    if refund.status not in (*RESERVED_STATUSES, RefundStatus.SUCCEEDED):
        return f"Sill's own refund {refund.id}: already {refund.status} in Sill"
    if refund.status == RefundStatus.SUCCEEDED and (
        refund.provider_refund_id != reported.provider_refund_id
    ):
        # Sill settled another provider refund for this key: reconciliation shows the pair.
        return f"Sill's own refund {refund.id} settled as {refund.provider_refund_id}; unchanged"
    why = reported.failure_reason.replace("_", " ") if reported.failure_reason else ""
    message = (
        f"{rail_label(refund.rail)} reported that this refund {reported.status} after it was "
        "settled" + (f" ({why})" if why else "") + ": the money went back to you, not to the "
        "buyer, and it is refundable again."
    )
    # Decided under the refund's row lock, not on the state read above: a worker holding the
    # rail's earlier "succeeded" may settle it meanwhile, and the report must not be lost.
    done = note_failure_at_rail(
        refund_id=refund.id,
        provider_refund_id=reported.provider_refund_id,
        message=message,
        source=event_id,
    )
    if done == "noted":
        return (
            f"Sill's own refund {refund.id}: still executing; reversed if it is settled as "
            f"{reported.provider_refund_id}"
        )
    if done == "unchanged":
        return f"Sill's own refund {refund.id}: unchanged (already failed or reversed)"
    return f"Sill's own refund {refund.id}: failed after settlement, reversed"


def notify_reversed(*, refund_id: str) -> bool:
    """Email the owners and admins that a settled refund failed at the rail, once: each their
    own message (one refused address keeps nobody else from hearing).

    Sent by ``refunds.notify_reversed``, enqueued on the commit that reversed the refund, or
    by the every-minute sweep (:func:`notify_missed_reversals`) when that message was lost.
    Both claim the refund's ``reversal_notified_at`` with a conditional UPDATE first, so a
    task delivered twice, or a task and the sweep, send one email. A mail server that is down
    is raised (an ``OSError``), the claim given back, for the task's retry or the sweep. A
    refusal of every message gives it back too, and is answered False, not raised: the refund
    waits (:func:`sill.accounts.notices.back_off`) before the sweep tries again. Only the
    error's class and the refund's id are logged."""
    claimed = Refund.objects.filter(
        pk=refund_id, reversed_at__isnull=False, reversal_notified_at__isnull=True
    ).update(reversal_notified_at=timezone.now())
    if claimed != 1:
        return False
    refund = Refund.objects.select_related("site", "order").get(pk=refund_id)
    return send_claimed(
        notice=f"{NOTICE}:{refund.pk}",
        what=f"refund {refund.pk}: failed-after-settlement email",
        send=lambda: _email_reversed(refund),
        give_back=lambda: Refund.objects.filter(pk=refund.pk).update(reversal_notified_at=None),
        log=logger,
    )


def notify_missed_reversals() -> int:
    """The sweep: email the owners and admins of each reversed refund they were not told of;
    how many were told. One whose email was refused is skipped while it waits; a mail server
    that is down ends the run, raised."""
    untold = (
        Refund.objects.filter(reversed_at__isnull=False, reversal_notified_at__isnull=True)
        .order_by("reversed_at", "id")
        .values_list("pk", flat=True)
    )
    due = not_backing_off(untold.iterator(chunk_size=SWEEP_LIMIT), notice=NOTICE, limit=SWEEP_LIMIT)
    return sum(notify_reversed(refund_id=pk) for pk in due)


def _email_reversed(refund: Refund) -> Delivery:
    order = refund.order
    base = (settings.SILL_BASE_URL or "").rstrip("/")
    lines = [
        f"A refund on {refund.site.name} that Sill had settled failed at "
        f"{rail_label(refund.rail)}: the buyer did not get the money back.",
        "",
        refund_headline(refund),
        *([f"Order: #{order.number}"] if order else []),
        f"What happened: {refund.failure_message}",
        "",
        "The amount is refundable again. Check with the buyer (their card may be closed) and "
        "refund again, or another way, from the order page:",
        base + reverse("orders:detail", args=[refund.order_id]) if order else base,
    ]
    return warn_if_nobody_told(
        refund,
        notice="failed-after-settlement",
        delivery=email_members(
            site_id=refund.site_id,
            notice=f"{NOTICE}:{refund.pk}",
            subject=f"[Sill] Refund failed after settlement: {refund_subject(refund)}",
            lines_for={role: lines for role in DECIDERS},
        ),
    )
