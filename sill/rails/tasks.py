"""Celery tasks of rails: processing the webhook events a rail delivered (enqueued on commit)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from sill.rails.stripe_events import process_event


# A lost connection or lock timeout rolls the whole event back (it stays unprocessed), so a
# retry applies it once; anything else is a bug to see in the logs, not to loop on.
@shared_task(
    name="rails.process_stripe_event",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def process_stripe_event(event_pk: int) -> str:
    """Apply one stored Stripe event; a redelivered task finds it processed and does nothing."""
    return process_event(event_pk)
