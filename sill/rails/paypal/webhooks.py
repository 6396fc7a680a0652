"""PayPal webhooks: ``POST /webhooks/paypal/<site_id>``, verified by PayPal, stored once.

PayPal signs a delivery with a certificate of its own; Sill does not check that signature
itself but asks PayPal (``POST /v1/notifications/verify-webhook-signature``) with the five
``PAYPAL-*`` headers, the webhook id saved on Settings → Rails and the event as received
(``PayPalClient.verify_webhook_signature``). A missing header, a body that is not a PayPal
event (read with the project's strict JSON reader), no saved webhook id, or a ``FAILURE``
verdict is 400 and stores nothing; PayPal giving no verdict at all is 503 (it redelivers).
Each verification is a call with the merchant's credentials, so PayPal is not asked about a
delivery whose algorithm or certificate address PayPal never sends, nor about an event id
already stored, and at most ``SILL_RATE_PAYPAL_VERIFY`` times a minute per site (then 429).

Each event id is stored once (``WebhookEvent``'s unique constraint, rail ``paypal``): a
redelivery answers 200 and changes nothing. Processing (``rails.process_paypal_event``,
sill.rails.paypal.events) runs on commit.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from sill import jsonbody
from sill.api import RateLimited, spend_paypal_verification
from sill.error_pages import machine_post_only
from sill.errors import SillError
from sill.orders.models import Rail
from sill.rails.base import RailError
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.paypal import api_base_for
from sill.rails.paypal.client import PayPalClient
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.webhook_common import MAX_BODY_BYTES
from sill.rails.webhook_common import refuse as _refuse

logger = logging.getLogger(__name__)

HEADERS = (
    "PAYPAL-TRANSMISSION-ID",
    "PAYPAL-TRANSMISSION-TIME",
    "PAYPAL-TRANSMISSION-SIG",
    "PAYPAL-CERT-URL",
    "PAYPAL-AUTH-ALGO",
)


AUTH_ALGO = "SHA256withRSA"
# Where PayPal publishes the certificates it signs webhooks with (live and sandbox).
CERT_HOSTS = frozenset(
    {"api.paypal.com", "api-m.paypal.com", "api.sandbox.paypal.com", "api-m.sandbox.paypal.com"}
)


def _paypal_cert_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        # ``.port`` raises ValueError too (a port that is not a number, or out of range).
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and parts.hostname in CERT_HOSTS
        and port is None
        and parts.path.startswith("/v1/notifications/certs/")
    )


class VerificationUnavailable(SillError):
    code = "rail_unavailable"
    status = 503


@csrf_exempt
@machine_post_only
def paypal_webhook(request: HttpRequest, site_id: str) -> JsonResponse:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES or len(request.body) > MAX_BODY_BYTES:
        return _refuse("The body is too large for a PayPal webhook.")
    payload = request.body
    account = (
        RailAccount.objects.filter(site_id=site_id, rail=Rail.PAYPAL).select_related("site").first()
    )
    if account is None:
        return _refuse("PayPal is not connected to this site.")
    headers = {name: request.headers.get(name, "").strip() for name in HEADERS}
    missing = [name for name, value in headers.items() if not value]
    if missing:
        return _refuse(f"The webhook has no {', '.join(missing)} header.")
    try:
        event = jsonbody.loads(payload)
    except jsonbody.MalformedJSON:
        return _refuse("The body is not a PayPal event.")
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("id"), str)
        or not isinstance(event.get("event_type"), str)
        or not event["id"].strip()
    ):
        return _refuse("The body is not a PayPal event.")
    webhook_id = str((account.config or {}).get("webhook_id") or "")
    if not webhook_id:
        return _refuse("No PayPal webhook id is saved for this site (Settings → Rails).")
    # Asking PayPal costs a call with the merchant's credentials: never for what PayPal never
    # sends, nor for an event already stored (nothing would change), and at most the site's
    # budget a minute (past it, PayPal is asked to deliver again later).
    if headers["PAYPAL-AUTH-ALGO"] != AUTH_ALGO:
        return _refuse(f"PayPal signs its webhooks {AUTH_ALGO}, not this.")
    if not _paypal_cert_url(headers["PAYPAL-CERT-URL"]):
        return _refuse("The PAYPAL-CERT-URL header is not a PayPal certificate address.")
    event_id = event["id"].strip()[:255]
    if WebhookEvent.objects.filter(site=account.site, rail=Rail.PAYPAL, event_id=event_id).exists():
        return JsonResponse({"received": True, "duplicate": True})
    try:
        spend_paypal_verification(site_id=account.site_id)
    except RateLimited as limited:
        response = JsonResponse(limited.as_dict(), status=limited.status)
        response["Retry-After"] = str(limited.retry_after)
        return response
    try:
        verified = _client(account).verify_webhook_signature(
            headers=headers, webhook_id=webhook_id, event=payload
        )
    except RailSecretUnreadable:
        logger.warning("the PayPal client secret of site %s cannot be decrypted", site_id)
        return _refuse("Sill cannot ask PayPal to verify this webhook: its secret is unreadable.")
    except RailError as exc:
        logger.warning("PayPal webhook of site %s not verified: %s", site_id, exc.message)
        unavailable = VerificationUnavailable(
            "PayPal did not answer the verification of this webhook; deliver it again."
        )
        return JsonResponse(unavailable.as_dict(), status=503)
    if not verified:
        return _refuse("PayPal did not verify this webhook's signature.")
    try:
        with transaction.atomic():
            stored = WebhookEvent.objects.create(
                site=account.site,
                rail=Rail.PAYPAL,
                event_id=event_id,
                type=event["event_type"][:100],
                payload=payload.decode("utf-8"),
            )
            transaction.on_commit(lambda: _enqueue(stored.pk))
    except IntegrityError:
        return JsonResponse({"received": True, "duplicate": True})
    return JsonResponse({"received": True, "duplicate": False})


def _client(account: RailAccount) -> PayPalClient:
    return PayPalClient(
        client_id=str((account.config or {}).get("client_id") or ""),
        client_secret=account.get_secret(),
        api_base=api_base_for(account),
        timeout=float(getattr(settings, "SILL_PAYPAL_TIMEOUT_SECONDS", 20)),
    )


def _enqueue(event_pk: int) -> None:
    from sill.rails.paypal.events import process_paypal_event

    process_paypal_event.delay(event_pk)


urlpatterns = [
    path("webhooks/paypal/<str:site_id>", paypal_webhook, name="paypal-webhook"),
]
