"""Shopify webhooks: ``POST /webhooks/shopify/<site_id>``, verified, stored once, processed later.

Shopify signs each delivery with the app's client secret: ``X-Shopify-Hmac-Sha256`` is the
base64 HMAC-SHA256 of the raw body, compared here in constant time against every stored
secret (several while one is rotated). A bad signature, a delivery for another shop, a body
that is not a JSON object, or one without ``X-Shopify-Webhook-Id`` is 400 and records
nothing. The webhook id is stored once (``WebhookEvent``'s unique constraint): a redelivery
answers 200 and changes nothing. So is the body (its sha256, per site): the signature does not
cover the webhook id, so the same signed body under another id is a replay, answered the same
200 "duplicate", reading nothing and enqueuing nothing (sill.rails.webhook_common.body_sha256).
Digests are kept as long as the events (none is deleted), so no body is refused for its age:
the signed ``updated_at`` could say how old it is, but an old body Sill never took costs one
read of the order's current state (a late delivery never overwrites a newer one), once, while
refusing it could drop a late genuine delivery. ``X-Shopify-Triggered-At`` is not signed.
Processing (``rails.process_shopify_event``) runs on commit.

Topics: ``orders/create``, ``orders/updated`` (and any other ``orders/*``), ``refunds/create``,
``disputes/create``, ``disputes/update``; each makes Sill read the order again and upsert it
(sill.rails.shopify.sync), which records outside refunds and disputes.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from sill import jsonbody
from sill.error_pages import machine_post_only
from sill.orders.models import Rail
from sill.queue import enqueue_on_commit
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.webhook_common import MAX_BODY_BYTES, body_sha256
from sill.rails.webhook_common import refuse as _refuse
from sill.rails.webhook_common import verify_base64_hmac as verify

logger = logging.getLogger(__name__)


@csrf_exempt
@machine_post_only
def shopify_webhook(request: HttpRequest, site_id: str) -> JsonResponse:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        return _refuse("The body is too large for a Shopify webhook.")
    payload = request.body
    if len(payload) > MAX_BODY_BYTES:
        return _refuse("The body is too large for a Shopify webhook.")
    account = (
        RailAccount.objects.filter(site_id=site_id, rail=Rail.SHOPIFY)
        .select_related("site")
        .first()
    )
    if account is None:
        return _refuse("No Shopify store is connected to this site.")
    try:
        secrets = account.get_webhook_secrets()
    except RailSecretUnreadable:
        logger.warning("the Shopify webhook secrets of site %s cannot be decrypted", site_id)
        secrets = []
    if not secrets or not verify(
        payload, request.headers.get("X-Shopify-Hmac-Sha256", ""), secrets
    ):
        return _refuse("The X-Shopify-Hmac-Sha256 header does not sign this body.")
    shop = request.headers.get("X-Shopify-Shop-Domain", "")
    if shop and shop != account.connected_account:
        return _refuse("The webhook comes from another store than this site's.")
    event_id = request.headers.get("X-Shopify-Webhook-Id", "").strip()
    topic = request.headers.get("X-Shopify-Topic", "").strip()
    if not event_id or not topic:
        return _refuse("The webhook has no X-Shopify-Webhook-Id or X-Shopify-Topic.")
    try:
        body = jsonbody.loads(payload)
    except jsonbody.MalformedJSON:
        return _refuse("The body is not a Shopify webhook.")
    if not isinstance(body, dict):
        return _refuse("The body is not a Shopify webhook.")
    try:
        with transaction.atomic():
            stored = WebhookEvent.objects.create(
                site=account.site,
                rail=Rail.SHOPIFY,
                event_id=event_id[:255],
                type=topic[:100],
                payload=payload.decode("utf-8"),
                # The shop whose secret verified it (its domain header, if sent, agrees).
                sender=account.connected_account,
                # Unique per site too: a replay of this body under a fresh id is refused here.
                body_sha256=body_sha256(payload),
            )
            enqueue_on_commit(
                "rails.process_shopify_event", stored.pk, recovered_by="rails.retry_webhook_events"
            )
    except IntegrityError:
        return JsonResponse({"received": True, "duplicate": True})
    return JsonResponse({"received": True, "duplicate": False})


urlpatterns = [
    path("webhooks/shopify/<str:site_id>", shopify_webhook, name="shopify-webhook"),
]
