"""Celery tasks of rails: processing the webhook events a rail delivered (enqueued on commit),
and retrying those whose processing failed (sill.rails.event_attempts), for every rail."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import OperationalError

from sill.orders.models import Rail
from sill.rails.event_attempts import attempt_event, claim_events_to_retry, give_up_on_events
from sill.rails.payment_account import learn_payment_account_task  # noqa: F401 (registers it)


# A lost connection or lock timeout rolls the whole event back (it stays unprocessed), so a
# quick retry applies it once. Any other failure is kept on the event and logged; the beat
# task below tries it again a few minutes later, a bounded number of times.
@shared_task(
    name="rails.process_stripe_event",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def process_stripe_event(event_pk: int) -> str:
    """Apply one stored Stripe event; a redelivered task finds it processed and does nothing."""
    return attempt_event(event_pk).outcome


@shared_task(name="rails.retry_webhook_events")
def retry_webhook_events_task() -> int:
    """Give up on events out of attempts, re-enqueue the ones due, each with its rail's task.
    Beat: every minute."""
    give_up_on_events()
    claimed = claim_events_to_retry()
    tasks: dict[str, Any] = {
        Rail.STRIPE: process_stripe_event,
        Rail.PAYPAL: process_paypal_event,
        Rail.SHOPIFY: process_shopify_event,
        Rail.WOOCOMMERCE: process_woocommerce_event,
    }
    for event_pk, rail in claimed:
        tasks[rail].delay(event_pk)
    return len(claimed)


# The other rails' tasks live in their packages; imported here so that workers register them.
from sill.rails.paypal.events import process_paypal_event  # noqa: E402
from sill.rails.shopify.tasks import process_shopify_event  # noqa: E402
from sill.rails.woocommerce.tasks import (  # noqa: E402, F401
    process_woocommerce_event,
    record_woocommerce_refund,
    retry_woocommerce_records,
)
