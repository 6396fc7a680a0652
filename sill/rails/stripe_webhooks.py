"""Stripe webhooks: ``POST /webhooks/stripe/<site_id>`` and the processing of its events.

Receiving only verifies and stores: the raw body must carry a valid ``Stripe-Signature``
under one of the site's signing secrets (several while one is rotated; checked by the
stripe SDK, which compares in constant time and enforces the 300 s tolerance), each event id
is stored once (a unique constraint), and the answer is a quick 200. A bad signature is 400
and records nothing. Processing runs in the ``rails.process_stripe_event`` task, enqueued on
commit (sill.rails.stripe_events).
"""

from __future__ import annotations

import logging
import re
import time

import stripe
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
from sill.rails.webhook_common import MAX_BODY_BYTES, WebhookRefused
from sill.rails.webhook_common import refuse as _refuse

logger = logging.getLogger(__name__)

TOLERANCE_SECONDS = 300


def verify(payload: bytes, header: str, secrets: list[str], *, now: float | None = None) -> bool:
    """Whether ``header`` signs ``payload`` under any of ``secrets`` (Stripe's scheme)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    # The SDK compares signatures with hmac.compare_digest, which raises on non-ASCII text.
    if not header.isascii() or not _fresh(header, time.time() if now is None else now):
        return False
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(text, header, secret, TOLERANCE_SECONDS)
        except stripe.SignatureVerificationError:
            continue
        return True
    return False


def _fresh(header: str, now: float) -> bool:
    # The SDK refuses only old timestamps; a far-future ``t`` would let a captured signature
    # live on, so it is refused too. ASCII digits only, and few of them: "²".isdigit() is true
    # but int() refuses it, as it does more than 4300 digits (both were a 500).
    stamps = [p.strip()[2:].strip() for p in header.split(",") if p.strip().startswith("t=")]
    if len(stamps) != 1 or not re.fullmatch(r"[0-9]{1,15}", stamps[0]):
        return False
    return abs(now - int(stamps[0])) <= TOLERANCE_SECONDS


@csrf_exempt
@machine_post_only
def stripe_webhook(request: HttpRequest, site_id: str) -> JsonResponse:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        return _refuse("The body is too large for a Stripe event.")
    payload = request.body
    if len(payload) > MAX_BODY_BYTES:
        return _refuse("The body is too large for a Stripe event.")
    account = (
        RailAccount.objects.filter(site_id=site_id, rail=Rail.STRIPE).select_related("site").first()
    )
    if account is None:
        return _refuse("No Stripe rail is configured for this site.")
    try:
        secrets = account.get_webhook_secrets()
    except RailSecretUnreadable:
        logger.warning("the Stripe signing secrets of site %s cannot be decrypted", site_id)
        secrets = []
    header = request.headers.get("Stripe-Signature", "")
    if not secrets or not verify(payload, header, secrets):
        return _refuse("The Stripe-Signature header does not sign this body.")
    try:
        stored = store_event(account=account, payload=payload)
    except WebhookRefused as refused:
        return JsonResponse(refused.as_dict(), status=400)
    if stored is None:
        return JsonResponse({"received": True, "duplicate": True})
    enqueue_on_commit(
        "rails.process_stripe_event", stored.pk, recovered_by="rails.retry_webhook_events"
    )
    return JsonResponse({"received": True, "duplicate": False})


def store_event(*, account: RailAccount, payload: bytes) -> WebhookEvent | None:
    """Store one Stripe event of ``account``'s site, once: the new row, or ``None`` when the
    site already holds an event with this id (a redelivery changes nothing).

    ``payload`` is a verified webhook body or an event read back from Stripe
    (sill.rails.replay): both go through these checks. Raises ``WebhookRefused`` when it is
    not a sane Stripe event or belongs to another connected account. Processing is the
    caller's: the webhook enqueues it on commit, a replay runs it inline.
    """
    try:
        # The project's strict reader: a signed body is still refused when nested too deep
        # (RecursionError would be a 500) or holding NUL (PostgreSQL text refuses it).
        event = jsonbody.loads(payload)
    except jsonbody.MalformedJSON:
        raise WebhookRefused("The body is not a Stripe event.") from None
    # Stripe's ids and types are non-empty strings: ``"id": null`` was stored as the event
    # "None" (and every later such body answered "duplicate" of it), ``["x"]`` as "['x']".
    event_id = event.get("id") if isinstance(event, dict) else None
    event_type = event.get("type") if isinstance(event, dict) else None
    if not isinstance(event_id, str) or not event_id.strip() or not isinstance(event_type, str):
        raise WebhookRefused("The body is not a Stripe event.")
    connected = event.get("account") or ""
    if connected and connected != account.connected_account:
        raise WebhookRefused("The event belongs to a connected account of another site.")
    try:
        with transaction.atomic():
            return WebhookEvent.objects.create(
                site=account.site,
                rail=Rail.STRIPE,
                event_id=event_id[:255],
                type=event_type[:100],
                payload=payload.decode("utf-8"),
            )
    except IntegrityError:
        return None


urlpatterns = [
    path("webhooks/stripe/<str:site_id>", stripe_webhook, name="stripe-webhook"),
]
