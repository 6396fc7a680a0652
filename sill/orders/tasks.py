"""Celery tasks of orders: charging an agent's purchase, and telling the owners and admins of a
charge that needs attention. Enqueued on commit (the notice by name, ``sill.queue``)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Task, shared_task
from django.conf import settings

from sill.orders.charge_attention import notify_charge_attention, notify_missed_charge_attention
from sill.orders.charging import ChargeRetry, charge_order, stuck_charge_order_ids

logger = logging.getLogger(__name__)


@shared_task(name="orders.charge", bind=True, max_retries=None, acks_late=True)
def charge_order_task(self: Task[..., str], order_id: str, payment_method: str = "") -> str:
    """One attempt at the order's pending charge; a retry uses the same idempotency key.

    The backoff (exponential, full jitter) and the attempt limit live in
    ``sill.orders.charging`` on the charge's own counter, so a redelivered or swept task counts
    against the same budget; past it the charge is only looked up (it succeeds, fails on the
    rail's word, or needs attention), never retried here.
    """
    try:
        return charge_order(order_id=order_id, payment_method=payment_method)
    except ChargeRetry as exc:
        raise self.retry(exc=exc, countdown=exc.countdown) from exc


def recover_stuck_charges() -> int:
    """Re-enqueue the charge task for every stuck pending charge; how many.

    Here beside the task it enqueues, so that ``charging`` never imports the tasks.
    """
    older = timedelta(seconds=int(getattr(settings, "SILL_RECOVER_AFTER_SECONDS", 60)))
    order_ids = stuck_charge_order_ids(older_than=older)
    for order_id in order_ids:
        charge_order_task.delay(order_id)
    return len(order_ids)


@shared_task(name="orders.recover_stuck")
def recover_stuck_charges_task() -> int:
    """Re-enqueue pending charges whose lease lapsed or whose check is due, then email the
    owners and admins of any charge needing attention they were not told of; how many were
    re-enqueued.
    Beat: every minute."""
    recovered = recover_stuck_charges()
    # After the recovery, and never failing it: with SMTP down (an OSError) the claim was given
    # back, so the charge stays untold and the next minute tries again, as refunds.check_attention
    # does. A refused email does not get here: it skips its charge and the others are told. Only
    # the error's class is logged: an SMTP error's text can carry the server's reply and the
    # recipients' addresses.
    try:
        notify_missed_charge_attention()
    except OSError as exc:
        logger.warning("charge attention emails not sent: mail is failing (%s)", type(exc).__name__)
    return recovered


@shared_task(
    name="orders.notify_attention",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the claim was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_charge_attention_task(charge_id: str) -> None:
    """Email the site's owners and admins, once, that a charge needs attention (enqueued on
    commit)."""
    notify_charge_attention(charge_id=charge_id)
