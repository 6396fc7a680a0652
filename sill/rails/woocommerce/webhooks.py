"""WooCommerce webhooks: ``POST /webhooks/woocommerce/<site_id>`` (``order.created``,
``order.updated``), verified, stored once, applied on commit.

``X-WC-Webhook-Signature`` is the base64 HMAC-SHA256 of the raw body under the webhook's
secret, compared in constant time. A bad signature, a delivery from another store, or a body
that is not an order is 400 and records nothing. Another store is told by the unsigned
``X-WC-Webhook-Source`` header and, since a secret may be shared by two stores, by the body
itself: an order links itself under its store (``_links.self``, signed), and one naming another
store than the site's is refused whatever the header says (orders.store_named_by). A body
that names no store has only the header's word: taken while no other store connected to Sill
holds the secret that signs it, refused (``webhook_store_unknown``) when one does. When
a webhook is created WooCommerce sends a ping whose form body is ``webhook_id=<n>`` (no
order): it is answered 200 and stored nowhere.

Deduplication: WooCommerce gives each delivery attempt a new ``X-WC-Webhook-Delivery-ID``,
so a redelivery of the same change would look new; the event id is the order id, its
``date_modified_gmt`` and a digest of the body instead (the delivery id only when the date is
missing). The same change delivered twice is the same body, stored once; the second answer is
200 and changes nothing. The date alone is not enough: it has one-second resolution, and a
checkout creates the order pending and the gateway marks it paid within the same second, so
the paid state would have been answered "duplicate" and never brought in. The body's whole
sha256 is also kept once per site (``WebhookEvent.body_sha256``), whatever the event id: the
signature does not cover the delivery id, so a body without ``date_modified_gmt`` (named by
its delivery id) would otherwise be taken again under every fresh id a replayer sends.

Each stored event names its sender, the store whose secret verified it. Processing files the
order under that store; one processed or retried after the site was connected to another
store is settled unapplied, its outcome saying so (neither store's orders change).
"""

from __future__ import annotations

import hmac
import logging
import re

from celery import shared_task
from django.db import IntegrityError, OperationalError, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from sill import jsonbody
from sill.error_pages import machine_post_only
from sill.orders.models import Rail
from sill.queue import enqueue_on_commit
from sill.rails.event_attempts import attempt_event
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.webhook_common import MAX_BODY_BYTES, body_sha256
from sill.rails.webhook_common import refuse as _refuse
from sill.rails.webhook_common import verify_base64_hmac as verify
from sill.rails.woocommerce.orders import same_store, store_named_by

logger = logging.getLogger(__name__)


TOPICS = frozenset({"order.created", "order.updated"})
_PING = re.compile(rb"^webhook_id=[0-9]{1,20}$")


@csrf_exempt
@machine_post_only
def woocommerce_webhook(request: HttpRequest, site_id: str) -> JsonResponse:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES or len(request.body) > MAX_BODY_BYTES:
        return _refuse("The body is too large for a WooCommerce webhook.")
    payload = request.body
    account = (
        RailAccount.objects.filter(site_id=site_id, rail=Rail.WOOCOMMERCE)
        .select_related("site")
        .first()
    )
    if account is None:
        return _refuse("No WooCommerce store is connected to this site.")
    if _PING.match(payload) and not request.headers.get("X-WC-Webhook-Topic"):
        return JsonResponse({"received": True, "ping": True})
    try:
        secrets = account.get_webhook_secrets()
    except RailSecretUnreadable:
        logger.warning("the WooCommerce webhook secret of site %s cannot be decrypted", site_id)
        secrets = []
    signature = request.headers.get("X-WC-Webhook-Signature", "")
    # Each compared (no early exit): which of them sign it is asked of a body naming no store.
    signing = [secret for secret in secrets if verify(payload, signature, [secret])]
    if not signing:
        return _refuse("The X-WC-Webhook-Signature header does not sign this body.")
    source = request.headers.get("X-WC-Webhook-Source", "").strip()
    if source and not same_store(source, account.connected_account):
        return _refuse("The webhook comes from another store than this site's.")
    topic = request.headers.get("X-WC-Webhook-Topic", "").strip()
    if topic not in TOPICS:
        return _refuse("Sill takes the order.created and order.updated topics only.")
    try:
        body = jsonbody.loads(payload)
    except jsonbody.MalformedJSON:
        return _refuse("The body is not a WooCommerce order.")
    if not isinstance(body, dict) or "id" not in body:
        return _refuse("The body is not a WooCommerce order.")
    # The signature says which secret signed the body, not which store sent it, and the
    # source header is not signed: a merchant who gave two stores one secret would have
    # store A's delivery, sent here with the header naming this store (or none), filed as
    # this store's order of A's id. The body names its store itself, under the signature.
    named = store_named_by(body)
    if named is not None and not same_store(named, account.connected_account):
        return _refuse("The order belongs to another store than this site's.")
    # A body that names no store (no readable ``_links.self``) is the header's word alone,
    # unsigned: enough while only this store holds the secret that signed it, not when
    # another store connected to Sill holds it too (a merchant who gave two stores one).
    if named is None and _signed_with_another_stores_secret(account, signing):
        return _refuse(
            "The order names no store, and the secret that signs it is another store's too: "
            "give each store's webhook a secret of its own (WooCommerce → Settings → Advanced "
            "→ Webhooks).",
            code="webhook_store_unknown",
        )
    modified = str(body.get("date_modified_gmt") or "")
    delivery = request.headers.get("X-WC-Webhook-Delivery-ID", "").strip()
    digest = body_sha256(payload)
    event_id = f"order-{body['id']}@{modified}#{digest[:16]}" if modified else delivery
    if not event_id:
        return _refuse("The webhook names no order change and no delivery id.")
    try:
        with transaction.atomic():
            stored = WebhookEvent.objects.create(
                site=account.site,
                rail=Rail.WOOCOMMERCE,
                event_id=event_id[:255],
                type=topic,
                payload=payload.decode("utf-8"),
                # The store whose secret verified it (its source header, if sent, agrees).
                sender=account.connected_account,
                # Unique per site too: a replay of this body under a fresh id is refused here.
                body_sha256=digest,
            )
            enqueue_on_commit(
                "rails.process_woocommerce_event",
                stored.pk,
                recovered_by="rails.retry_webhook_events",
            )
    except IntegrityError:
        return JsonResponse({"received": True, "duplicate": True})
    return JsonResponse({"received": True, "duplicate": False})


def _signed_with_another_stores_secret(account: RailAccount, signing: list[str]) -> bool:
    """Whether a secret in ``signing`` (those of ``account`` that sign a body) is also a
    webhook secret of another site's WooCommerce account connected to another store. Asked
    only of bodies that name no store."""
    others = (
        RailAccount.objects.filter(rail=Rail.WOOCOMMERCE)
        .exclude(pk=account.pk)
        .exclude(webhook_secrets_encrypted=b"")
    )
    for other in others.iterator():
        if same_store(other.connected_account, account.connected_account):
            continue  # the same store: whichever sent it, the order is that store's
        try:
            theirs = other.get_webhook_secrets()
        except RailSecretUnreadable:
            continue
        if any(hmac.compare_digest(a, b) for a in signing for b in theirs):
            return True
    return False


def process_event(event_pk: int) -> str:
    """Apply one stored order delivery (the signed body is the order): upsert it once, as an
    order of the store that sent it. A delivery from a store the site is no longer connected
    to is settled unapplied, in words saying why (Woo order ids are per store: filed under
    the store connected now, the old store's order 1001 would change the new store's)."""
    from django.utils import timezone

    from sill.rails.woocommerce.orders import UnreadableOrder, parse_order
    from sill.rails.woocommerce.sync import upsert_order

    event = WebhookEvent.objects.select_related("site").get(pk=event_pk)
    if event.processed_at is not None:
        return event.outcome
    connected = (
        RailAccount.objects.filter(site=event.site, rail=Rail.WOOCOMMERCE)
        .values_list("connected_account", flat=True)
        .first()
    )
    # Blank: stored before events named their sender and never given one (migration 0008);
    # the store connected now, as before.
    store_url = event.sender or connected
    try:
        if not connected:
            raise UnreadableOrder("no WooCommerce store is connected to this site any more")
        if store_url != connected:
            raise UnreadableOrder(
                f"sent by {store_url}, a store this site is no longer connected to "
                f"(it is now connected to {connected})"
            )
        # Filed under its sender, never under ``connected``: should the site switch stores
        # right now, the order still lands among its own store's.
        outcome = upsert_order(
            site=event.site,
            store_url=store_url,
            order=parse_order(jsonbody.loads(event.payload)),
        )
    except UnreadableOrder as exc:
        outcome = f"skipped: {exc}"
    WebhookEvent.objects.filter(pk=event.pk, processed_at__isnull=True).update(
        processed_at=timezone.now(), outcome=outcome[:300]
    )
    return outcome


@shared_task(
    name="rails.process_woocommerce_event",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def process_woocommerce_event(event_pk: int) -> str:
    """A failed attempt is kept on the event and retried by ``rails.retry_webhook_events``
    (sill.rails.event_attempts)."""
    return attempt_event(event_pk).outcome


urlpatterns = [
    path("webhooks/woocommerce/<str:site_id>", woocommerce_webhook, name="woocommerce-webhook"),
]
