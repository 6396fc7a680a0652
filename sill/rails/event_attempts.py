"""Attempts at processing stored webhook events: counted, their errors kept, retried, bounded.

Processing itself is each rail's ``process_event`` (one event, once: :data:`PROCESSORS`).
Around it, the same for every rail that takes webhooks (Stripe, PayPal, Shopify, WooCommerce):

- :func:`attempt_event` counts the attempt *before* processing, in its own commit, so an
  event that kills its worker (and is redelivered by the broker) is bounded like one that
  raises. A failure is rolled back by ``process_event``'s transaction and then written on the
  event (``last_error``) and logged with its traceback; it is never raised, except a
  transient one (``OperationalError``: a lost connection, a lock timeout; a rail's
  ``RetryableRailError``: Shopify throttling), which gives its attempt back and is raised for
  the task's own quick retry, while the event is younger than
  ``SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS``. Past that grace a transient failure counts and is
  kept like any other: a "transient" failure that never passes (a lock that is never free, a
  store that throttles every call) ends in a give-up, not in retries for good.
- :func:`claim_events_to_retry` picks, for the beat task ``rails.retry_webhook_events``, the
  events still unprocessed whose last attempt (or arrival, if the task never ran: a broker
  down at enqueue) is older than ``SILL_WEBHOOK_RETRY_AFTER_SECONDS``.
- :func:`give_up_on_events` marks the events out of attempts (``SILL_WEBHOOK_MAX_ATTEMPTS``)
  and logs each one loudly, once. An operator who fixed the cause runs ``manage.py rails
  replay-webhooks``, whose attempts ignore the bound (Stripe's events are also fetched from
  Stripe again; the other rails' stored ones are attempted again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, OperationalError
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from sill.orders.models import Rail
from sill.orders.outside import ExceedsCharge
from sill.queue import enqueue_on_commit
from sill.rails.base import RetryableRailError, rail_label
from sill.rails.models import WebhookEvent

logger = logging.getLogger(__name__)

# Each rail's processing of one stored event (imported when first used: the rails' event
# modules import this one's callers).
PROCESSORS: dict[str, str] = {
    Rail.STRIPE: "sill.rails.stripe_events.process_event",
    Rail.PAYPAL: "sill.rails.paypal.events.process_event",
    Rail.SHOPIFY: "sill.rails.shopify.events.process_event",
    Rail.WOOCOMMERCE: "sill.rails.woocommerce.webhooks.process_event",
}
# Failures that pass in seconds: the task retries them at once, the attempt given back.
TRANSIENT = (OperationalError, RetryableRailError)

# How many events one beat run re-enqueues; the next run (a minute later) takes the rest.
RETRY_BATCH = 200


def max_attempts() -> int:
    return int(getattr(settings, "SILL_WEBHOOK_MAX_ATTEMPTS", 5))


def retry_after() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "SILL_WEBHOOK_RETRY_AFTER_SECONDS", 300)))


def transient_grace() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS", 3600)))


@dataclass(frozen=True)
class Attempt:
    """What one attempt did: ``ok`` and the event's outcome, or not and why."""

    ok: bool
    outcome: str


def attempt_event(event_pk: int, *, bounded: bool = True) -> Attempt:
    """Process one stored webhook event of any rail, counting the attempt and keeping its
    error.

    ``bounded``: refuse an event that has used up its attempts (the task path); a replay
    passes ``False``. An event already processed is not attempted again: its outcome is
    returned. Raises only the :data:`TRANSIENT` failures (see the module docstring).
    """
    found = WebhookEvent.objects.filter(pk=event_pk).values_list("rail", "received_at").first()
    if found is None:
        return Attempt(ok=False, outcome="no such event")
    rail, received_at = found
    if rail not in PROCESSORS:
        return Attempt(ok=False, outcome=f"{rail_label(rail)} takes no webhooks")
    started = WebhookEvent.objects.filter(pk=event_pk, processed_at__isnull=True)
    if bounded:
        started = started.filter(attempts__lt=max_attempts())
    if not started.update(attempts=F("attempts") + 1, last_attempt_at=timezone.now()):
        return _not_started(event_pk)
    process: Callable[[int], str] = import_string(PROCESSORS[rail])
    try:
        return Attempt(ok=True, outcome=process(event_pk))
    except TRANSIENT as exc:
        if timezone.now() - received_at >= transient_grace():
            # Still failing long after it arrived: not a blip. Counted, kept, logged.
            return _failed(event_pk, rail, exc)
        # Rolled back and likely to pass in seconds: the task retries it. Giving the attempt
        # back keeps a database blip from using up the event's attempts.
        _record_failure(event_pk, exc, give_back=True)
        raise
    except ExceedsCharge as exc:
        # The rail holds a refund Sill's books cannot hold beside their own: the charge is
        # reconciled now, so the inbox shows both sides (a run reads only the charges active
        # in the last SILL_RECONCILE_DAYS and might never read this one). Every attempt asks
        # again; reading the charge twice opens nothing twice.
        event_id = WebhookEvent.objects.filter(pk=event_pk).values_list("event_id", flat=True)
        enqueue_on_commit(
            "refunds.catch_up_charge",
            exc.charge_id,
            event_id.first() or str(event_pk),
            recovered_by="rails.retry_webhook_events",
        )
        return _failed(event_pk, rail, exc)
    except Exception as exc:
        return _failed(event_pk, rail, exc)


def _failed(event_pk: int, rail: str, exc: Exception) -> Attempt:
    """The attempt failed for good: its error kept on the event and logged with the traceback
    (called in the ``except`` block that caught ``exc``)."""
    error = _record_failure(event_pk, exc)
    row = (
        WebhookEvent.objects.filter(pk=event_pk).values_list("event_id", "type", "site_id").first()
    )
    event_id, event_type, site_id = row or (str(event_pk), "?", "?")
    logger.exception(
        "%s event %s (%s) of site %s could not be processed: %s",
        rail_label(rail),
        event_id,
        event_type,
        site_id,
        error,
    )
    return Attempt(ok=False, outcome=error)


def _not_started(event_pk: int) -> Attempt:
    row = (
        WebhookEvent.objects.filter(pk=event_pk)
        .values("processed_at", "outcome", "attempts", "last_error")
        .first()
    )
    if row is None:
        return Attempt(ok=False, outcome="no such event")
    if row["processed_at"] is not None:
        return Attempt(ok=True, outcome=row["outcome"])
    return Attempt(
        ok=False, outcome=f"gave up after {row['attempts']} attempts: {row['last_error']}"
    )


def _record_failure(event_pk: int, exc: BaseException, *, give_back: bool = False) -> str:
    error = f"{type(exc).__name__}: {exc}".strip()[:500]
    changes: dict[str, object] = {"last_error": error}
    if give_back:
        changes["attempts"] = F("attempts") - 1
    try:
        WebhookEvent.objects.filter(pk=event_pk, attempts__gt=0).update(**changes)
    except DatabaseError as failed:
        # The database that just failed may still be failing: the log is all there is.
        logger.warning(
            "could not record the failure of webhook event %s (%s): %s",
            event_pk,
            type(failed).__name__,
            error,
        )
    return error


def _due(now: datetime) -> QuerySet[WebhookEvent]:
    cutoff = now - retry_after()
    return WebhookEvent.objects.filter(
        rail__in=list(PROCESSORS), processed_at__isnull=True, gave_up_at__isnull=True
    ).filter(
        Q(last_attempt_at__lte=cutoff) | Q(last_attempt_at__isnull=True, received_at__lte=cutoff)
    )


def claim_events_to_retry(*, now: datetime | None = None) -> list[tuple[int, str]]:
    """The unprocessed events due for another attempt, oldest first, each claimed once, as
    (pk, rail).

    Claiming stamps ``last_attempt_at`` with a conditional UPDATE, so an event waiting in a
    backlog is not enqueued again every minute, and two overlapping beat runs never both
    enqueue it.
    """
    now = now or timezone.now()
    due = _due(now).filter(attempts__lt=max_attempts())
    claimed = []
    for pk, rail in due.order_by("received_at", "id").values_list("pk", "rail")[:RETRY_BATCH]:
        if due.filter(pk=pk).update(last_attempt_at=now):
            claimed.append((pk, rail))
    return claimed


def _since(received_at: datetime) -> str:
    """``--since`` for a replay that takes the event in: its arrival to the second, in UTC
    with the zone written (a bare date would be read as midnight in the site's zone, after
    an event received early in the UTC day for a site west of UTC)."""
    return received_at.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def give_up_on_events(*, now: datetime | None = None) -> int:
    """Mark the events out of attempts, logging each at ERROR once; returns how many."""
    now = now or timezone.now()
    exhausted = _due(now).filter(attempts__gte=max_attempts())
    count = 0
    for event in exhausted.order_by("received_at", "id")[:RETRY_BATCH]:
        if not exhausted.filter(pk=event.pk).update(gave_up_at=now):
            continue
        count += 1
        logger.error(
            "GAVE UP on %s event %s (%s) of site %s after %d attempts; last error: %s. "
            "It stays stored unprocessed: fix the cause, then run `manage.py rails "
            "replay-webhooks --site %s --rail %s --since %s`.",
            rail_label(event.rail),
            event.event_id,
            event.type,
            event.site_id,
            event.attempts,
            event.last_error or "none recorded (the worker died during the attempt?)",
            event.site_id,
            event.rail,
            _since(event.received_at),
        )
    return count
