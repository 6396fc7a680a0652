"""Processing one stored Shopify webhook: read its order again and upsert it.

A webhook is a trigger, not the record: its REST-shaped body is read only for the order id,
and the order itself comes from the Admin GraphQL API (sill.rails.shopify.sync), so one
parser serves the sync command and every topic, and a late or reordered delivery can never
overwrite a newer state. The upsert is idempotent, so a task delivered twice is harmless;
``processed_at`` is set once. An order Shopify holds in a shape Sill cannot read or record (an
amount past what a signed record holds, a negative one) settles the event ``skipped: …``
with the reason, logged: a retry would read the same order.

An event from a shop the site is no longer connected to (its ``sender``) is settled without
reading anything: Shopify's order ids are global, so the shop connected now never holds the
order, and asking it (with its token) only answered "not found".
"""

from __future__ import annotations

import json
import logging

from django.utils import timezone

from sill.orders.models import Rail
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.shopify.orders import UnreadableOrder
from sill.rails.shopify.sync import sync_order

logger = logging.getLogger(__name__)

ORDER_TOPICS_PREFIX = "orders/"
BY_ORDER_ID = frozenset({"refunds/create", "disputes/create", "disputes/update"})


def order_id_of(topic: str, body: dict[str, object]) -> str:
    """The numeric order id a webhook is about, ``""`` when it names none."""
    value = body.get("id") if topic.startswith(ORDER_TOPICS_PREFIX) else None
    if topic in BY_ORDER_ID:
        value = body.get("order_id")
    if isinstance(value, bool) or not isinstance(value, int | str):
        return ""
    text = str(value)
    return text if text.isdigit() else ""


def process_event(event_pk: int) -> str:
    event = WebhookEvent.objects.select_related("site").get(pk=event_pk)
    if event.processed_at is not None:
        return "already processed"
    try:
        body = json.loads(event.payload)
    except ValueError:
        body = {}
    order_id = order_id_of(event.type, body if isinstance(body, dict) else {})
    connected = (
        RailAccount.objects.filter(site=event.site, rail=Rail.SHOPIFY)
        .values_list("connected_account", flat=True)
        .first()
    )
    if not order_id:
        outcome = f"ignored: topic {event.type} names no order"
    elif event.sender and event.sender != connected:
        now = f"it is now connected to {connected}" if connected else "no shop is connected now"
        outcome = (
            f"ignored: sent by {event.sender}, a shop this site is no longer connected to ({now})"
        )
    else:
        try:
            outcome = sync_order(site=event.site, order_id=order_id, event_id=event.event_id)
        except UnreadableOrder as exc:
            # Shopify's order as it is now, which a later attempt would read the same: the
            # event is settled saying why (as a sync names the order failed and reads on, and
            # a WooCommerce webhook skips its order), not retried until given up.
            logger.warning("shopify event %s of site %s: %s", event.event_id, event.site_id, exc)
            outcome = f"skipped: {exc.message}"
    WebhookEvent.objects.filter(pk=event.pk, processed_at__isnull=True).update(
        processed_at=timezone.now(), outcome=outcome[:300]
    )
    logger.info("shopify event %s (%s): %s", event.event_id, event.type, outcome)
    return outcome
