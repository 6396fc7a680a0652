"""Recording a Sill refund on its WooCommerce order, after Stripe confirmed it.

``POST /wp-json/wc/v3/orders/{id}/refunds`` with ``api_refund: false``: WooCommerce writes the
refund on the order and asks no gateway to move money (Stripe already did). This never fails
the Sill refund: a store that does not take the record (read-only keys: 401/403
``woocommerce_rest_cannot_create``; the store down) leaves a ``WooRefundRecord`` in
``not_updated`` with the reason in words, retried by the task and later by the beat task
every 15 minutes (``RETRY_EVERY``), for three days (``MAX_ATTEMPTS``; then ``gave_up``, still
shown on the order page). A store that says how long to wait (a 429's or 503's
``Retry-After``: a rate limit, maintenance mode) is not asked again sooner, by either.

A refund Stripe reports failed after Sill settled it (``refunds.services.reverse_settled_refund``)
is withdrawn (:func:`withdraw_woocommerce_record`): a record not yet written never is (the
buyer's money came back), and one already written is left for the merchant to delete, which
the order page says.

WooCommerce has no idempotency key, so the reason carries ``Sill refund <id>`` and, before
writing again after an attempt that may have reached the store, Sill reads the order's
refunds and adopts the one that names it: the Woo order gets one record per Sill refund.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import Task, shared_task
from django.db import transaction
from django.utils import timezone

from sill.money import Money
from sill.orders.models import Order
from sill.queue import enqueue_on_commit
from sill.rails.base import PermanentRailError, RailError
from sill.rails.woocommerce.client import WooCannotWrite
from sill.rails.woocommerce.models import WooOrderLink, WooRecordState, WooRefundRecord
from sill.rails.woocommerce.orders import SILL_REFUND_MARK

logger = logging.getLogger(__name__)

# The beat task runs every 15 minutes; a record not taken is tried on each run, so the order
# page can say "Sill retries every 15 minutes" and mean it. One GET and one POST each: cheap,
# and read-only keys are fixed by a person at any time.
RETRY_EVERY = timedelta(minutes=15)
MAX_ATTEMPTS = 3 * 24 * 4
# The task's own retries (30 s, 1 min, 2 min) are for a store down for a moment. A store that
# asks for a longer wait is left to the beat task, its next attempt pushed past the wait. Two
# attempts never write at once whoever runs them (attempt_record goes ahead only when due).
SOON_SECONDS = 30
SOON_AT_MOST = timedelta(minutes=5)
READ_ONLY_WORDS = (
    "The WooCommerce order was not updated: the store's REST API keys are read-only ({code}). "
    "The Stripe refund is done. Give the key Read/Write access in WooCommerce → Settings → "
    "Advanced → REST API, or enter new keys on Settings → Rails"
)


# States no attempt leaves: written, given up on, or withdrawn (the refund failed after all).
FINAL_STATES = (WooRecordState.RECORDED, WooRecordState.GAVE_UP, WooRecordState.WITHDRAWN)
WITHDRAWN_WORDS = (
    "The WooCommerce order was not updated: the Stripe refund failed after it was settled "
    "(the money came back), so there is no refund to record"
)


@dataclass(frozen=True)
class WooRecordResult:
    """``state``: a ``WooRecordState`` value, or ``not_woocommerce`` (nothing to record).
    ``retry_after``: the seconds the store asked Sill to wait before the next attempt.
    ``not_due``: nothing was tried: another attempt is writing, or its time has not come (the
    attempt that set it, or the beat task, takes it up)."""

    state: str
    message: str = ""
    woo_refund_id: str = ""
    retry_after: float | None = None
    not_due: bool = False


def queue_woocommerce_record(
    *, order: Order, refund_id: str, amount: Money, reason: str
) -> WooRefundRecord | None:
    """Note that ``refund_id`` must be recorded on ``order``'s Woo order and enqueue the task
    on commit. Call it inside the transaction that settles the refund; ``None`` when the order
    did not come from WooCommerce."""
    link = WooOrderLink.objects.filter(order=order).first()
    if link is None:
        return None
    record, _ = WooRefundRecord.objects.get_or_create(
        refund_id=refund_id,
        defaults={
            "site_id": order.site_id,
            "order": order,
            "amount_minor": amount.amount_minor,
            "currency": amount.currency,
            "reason": reason[:300],
            # The beat task's backstop: the task below may never run (its message lost with
            # a killed worker on the embedded broker) or crash without saying why.
            "next_attempt_at": _next_attempt(),
        },
    )
    enqueue_on_commit(
        "rails.record_woocommerce_refund",
        refund_id,
        recovered_by="rails.retry_woocommerce_records",
    )
    return record


def record_refund_on_woocommerce(
    *, order: Order, refund_id: str, amount: Money, reason: str
) -> WooRecordResult:
    """Write the refund on the Woo order once; never raises for what the store answers."""
    if (
        queue_woocommerce_record(order=order, refund_id=refund_id, amount=amount, reason=reason)
        is None
    ):
        return WooRecordResult(state="not_woocommerce")
    return attempt_record(refund_id=refund_id)


def attempt_record(*, refund_id: str) -> WooRecordResult:
    """One attempt for a queued record (the task's and the beat task's body)."""
    from sill.rails.registry import RailDisabled
    from sill.rails.woocommerce.sync import woo_client_for

    with transaction.atomic():
        record = (
            WooRefundRecord.objects.select_related("order__site", "order__woocommerce")
            .select_for_update(of=("self",))
            .get(refund_id=refund_id)
        )
        if record.state in FINAL_STATES:
            return WooRecordResult(record.state, record.last_error, record.woo_refund_id)
        # A second's grace: a task retry sent with the countdown that time was set from may run
        # a hair before it.
        now = timezone.now() + timedelta(seconds=1)
        if record.attempts and record.next_attempt_at and record.next_attempt_at > now:
            # Another attempt is writing on the store now (each one, below, sets the next
            # attempt's time before it leaves the lock), or the store asked for a wait that has
            # not passed. Woo has no idempotency key: two attempts writing at once would each
            # find no refund on the order and write one. Nothing is sent.
            return WooRecordResult(
                record.state, "Another attempt is recording it, or it is not due yet.", not_due=True
            )
        reached_before = record.attempts > 0
        record.attempts += 1
        # Due again later whatever happens to this attempt (a crash, a killed worker): the
        # beat task takes it up then, and not while this attempt may still be writing.
        record.next_attempt_at = _next_attempt()
        record.save(update_fields=["attempts", "next_attempt_at"])
    link = record.order.woocommerce
    mark = f"{SILL_REFUND_MARK}{refund_id}"
    try:
        client = woo_client_for(record.order.site)
        if client.store_url != link.store_url:
            # Woo order ids are per store: this id at the store now connected is another
            # order altogether (someone else's), never to be marked refunded.
            raise PermanentRailError(
                f"the order came from {link.store_url}, and this site is now connected to "
                f"{client.store_url}; record the refund in that store's admin if it still runs"
            )
        woo_order_id = link.woo_order_id
        found = None
        if reached_before:
            found = next(
                (r for r in client.refunds(woo_order_id) if mark in str(r.get("reason"))), None
            )
        if found is None:
            found = client.create_refund(
                woo_order_id,
                amount=Money(record.amount_minor, record.currency).major_str(),
                reason=f"{record.reason} ({mark})" if record.reason else mark,
            )
    except WooCannotWrite as exc:
        code = "woocommerce_rest_cannot_create" if "cannot_create" in exc.message else exc.message
        return _not_updated(record, READ_ONLY_WORDS.format(code=code))
    except RailDisabled as exc:
        return _not_updated(record, f"The WooCommerce order was not updated: {exc.message}")
    except PermanentRailError as exc:
        return _not_updated(
            record, f"The WooCommerce order was not updated: {exc.message}", final=True
        )
    except RailError as exc:
        return _not_updated(
            record,
            f"The WooCommerce order was not updated yet: {exc.message}",
            retry_after=exc.retry_after,
        )
    WooRefundRecord.objects.filter(pk=record.pk).update(
        state=WooRecordState.RECORDED,
        woo_refund_id=str(found.get("id")),
        last_error="",
        next_attempt_at=None,
        recorded_at=timezone.now(),
    )
    return WooRecordResult(WooRecordState.RECORDED, woo_refund_id=str(found.get("id")))


def withdraw_woocommerce_record(*, refund_id: str) -> str | None:
    """``refund_id`` failed at Stripe after it was settled: a record not written yet never is
    (``withdrawn``). Returns the record's state afterwards (``recorded``: already on the Woo
    order, for the merchant to delete there), or ``None`` when the refund has none.

    Under the record's row lock, which an attempt takes before it writes: an attempt that
    comes after sees ``withdrawn`` and sends nothing. One already writing on the store when
    this runs ends ``recorded`` (the store has it), which the order page then says.
    """
    with transaction.atomic():
        record = WooRefundRecord.objects.select_for_update().filter(refund_id=refund_id).first()
        if record is None:
            return None
        if record.state in (WooRecordState.PENDING, WooRecordState.NOT_UPDATED):
            record.state = WooRecordState.WITHDRAWN
            record.last_error = WITHDRAWN_WORDS
            record.next_attempt_at = None
            record.save(update_fields=["state", "last_error", "next_attempt_at"])
        return record.state


def _not_updated(
    record: WooRefundRecord,
    message: str,
    *,
    final: bool = False,
    retry_after: float | None = None,
) -> WooRecordResult:
    state = (
        WooRecordState.GAVE_UP
        if final or record.attempts >= MAX_ATTEMPTS
        else WooRecordState.NOT_UPDATED
    )
    # Not over a withdrawal made while this attempt was out: that record stays unwritten.
    WooRefundRecord.objects.filter(pk=record.pk).exclude(state=WooRecordState.WITHDRAWN).update(
        state=state,
        last_error=message[:500],
        next_attempt_at=None if state == WooRecordState.GAVE_UP else _retry_at(retry_after),
    )
    logger.warning("refund %s: %s", record.refund_id, message)
    return WooRecordResult(state, message, retry_after=retry_after)


def _next_attempt() -> datetime:
    # A minute early, so the next beat run (every 15 minutes) finds it due. Set when a record
    # is queued and when an attempt begins: until then no other attempt writes (attempt_record).
    return timezone.now() + RETRY_EVERY - timedelta(minutes=1)


def _retry_at(retry_after: float | None) -> datetime:
    """When a failed attempt's record is due again: after the task's first soon retry, never
    before the wait the store asked for (read with a cap: sill.rails.retry_after). The beat
    task takes it up at its next pass after that, should the task's retries be lost."""
    return timezone.now() + timedelta(seconds=max(SOON_SECONDS, retry_after or 0.0))


def records_due(*, now: datetime | None = None) -> list[str]:
    """Refund ids whose record is due for another attempt (the beat task's pick)."""
    return list(
        WooRefundRecord.objects.filter(
            state__in=[WooRecordState.NOT_UPDATED, WooRecordState.PENDING],
            next_attempt_at__lte=now or timezone.now(),
        ).values_list("refund_id", flat=True)[:200]
    )


def woocommerce_records_for(order: Order) -> list[WooRefundRecord]:
    """The order page's selector: each refund's record on the Woo order (state, words)."""
    return list(WooRefundRecord.objects.filter(site_id=order.site_id, order=order))


# --- tasks (defined here, beside the service they call, so nothing imports in a circle) -----


@shared_task(name="rails.record_woocommerce_refund", acks_late=True, bind=True, max_retries=3)
def record_woocommerce_refund(self: Task, refund_id: str) -> str:
    """One attempt, retried a few times soon (a store down for a moment; never sooner than it
    asked); a record still not taken is left ``not_updated`` for the beat task (read-only keys
    need a person, a store asking for a long wait is the beat task's: ``SOON_AT_MOST``)."""
    result = attempt_record(refund_id=refund_id)
    wait = result.retry_after or 0.0
    soon = (
        not result.not_due
        and result.state == WooRecordState.NOT_UPDATED
        and "read-only" not in result.message
        and wait <= SOON_AT_MOST.total_seconds()
    )
    if soon and self.request.retries < 3:
        raise self.retry(countdown=max(SOON_SECONDS * 2**self.request.retries, wait))
    return result.state


@shared_task(name="rails.retry_woocommerce_records")
def retry_woocommerce_records() -> int:
    """Beat (every 15 minutes): try again every record whose backoff has passed."""
    due = records_due()
    for refund_id in due:
        attempt_record(refund_id=refund_id)
    return len(due)
