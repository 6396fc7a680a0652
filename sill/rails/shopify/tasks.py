"""The Celery task that processes a stored Shopify webhook (enqueued on commit)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from sill.rails.base import RetryableRailError
from sill.rails.event_attempts import attempt_event


# Shopify throttled or unreachable, a lost database connection: the event stays unprocessed
# and a retry applies it once (the upsert is idempotent).
@shared_task(
    name="rails.process_shopify_event",
    acks_late=True,
    autoretry_for=(OperationalError, RetryableRailError),
    retry_backoff=True,
    max_retries=5,
)
def process_shopify_event(event_pk: int) -> str:
    """A failed attempt is kept on the event and retried by ``rails.retry_webhook_events``
    (sill.rails.event_attempts); throttling is retried here, its attempt given back."""
    return attempt_event(event_pk).outcome
