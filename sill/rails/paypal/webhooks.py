"""PayPal webhooks: ``POST /webhooks/paypal/<site_id>``, verified by PayPal, stored once.

PayPal signs a delivery with a certificate of its own; Sill does not check that signature
itself but asks PayPal (``POST /v1/notifications/verify-webhook-signature``) with the five
``PAYPAL-*`` headers, the webhook id saved on Settings → Rails and the event as received
(``PayPalClient.verify_webhook_signature``). A missing header, a body that is not a PayPal
event (read with the project's strict JSON reader), no saved webhook id, or a ``FAILURE``
verdict is 400 and stores nothing; PayPal giving no verdict at all is 503 (it redelivers).

Each verification is a call with the merchant's credentials, which anyone who knows the
site's webhook address could spend, so the cheap checks come first and PayPal is not asked
about a delivery that cannot be PayPal's (headers PayPal never sends: a malformed
transmission id or signature, a transmission time outside PayPal's retries, another
algorithm or certificate address; 400), nor about a transmission already verified or an
event id already stored (200, a duplicate). Then at most ``SILL_RATE_PAYPAL_VERIFY_ADDRESS``
unverified deliveries a minute per client address and ``SILL_RATE_PAYPAL_VERIFY`` calls a
minute per site (then 429 with Retry-After): one address cannot use up the site's budget.

Each event id is stored once (``WebhookEvent``'s unique constraint, rail ``paypal``): a
redelivery answers 200 and changes nothing. Processing (``rails.process_paypal_event``,
sill.rails.paypal.events) runs on commit.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from sill import jsonbody
from sill.api import RateLimited, return_paypal_verification, spend_paypal_verification
from sill.client_address import client_address
from sill.error_pages import machine_post_only
from sill.errors import SillError
from sill.orders.models import Rail
from sill.queue import enqueue_on_commit
from sill.rails.base import RailError
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.paypal import client_for
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


# PayPal's transmission ids are UUIDs; its verify API takes at most 50 word characters.
TRANSMISSION_ID = re.compile(r"[A-Za-z0-9_-]{1,50}")
# RFC 3339 with a zone, as PayPal writes it ("2016-09-21T22:00:46Z", at times with a fraction).
TRANSMISSION_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})"
)
# PayPal redelivers what had no 2xx 25 times over three days, and its record of an event keeps
# one transmission id and time through the retries, so a retry may carry the first one's: a
# window of minutes would refuse PayPal's retries, which Sill's own 429 and 503 count on. A
# day of margin past the three days, and a few minutes of clock skew ahead.
MAX_TRANSMISSION_AGE = timedelta(days=4)
MAX_CLOCK_SKEW = timedelta(minutes=5)
# The verify API's limit; PayPal's RSA-2048 signature is 344 characters of base64.
MAX_SIGNATURE_CHARS = 500
BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _not_paypals(headers: dict[str, str], *, now: datetime) -> str | None:
    """Why these (present) PAYPAL-* headers cannot be a delivery of PayPal's; None when they
    could be. Pure: checked before anything is read from the database or asked of PayPal."""
    if not TRANSMISSION_ID.fullmatch(headers["PAYPAL-TRANSMISSION-ID"]):
        return "The PAYPAL-TRANSMISSION-ID header is not a PayPal transmission id."
    sent = _transmission_time(headers["PAYPAL-TRANSMISSION-TIME"])
    if sent is None:
        return "The PAYPAL-TRANSMISSION-TIME header is not a time."
    if not now - MAX_TRANSMISSION_AGE <= sent <= now + MAX_CLOCK_SKEW:
        return "The PAYPAL-TRANSMISSION-TIME header is outside the time PayPal delivers in."
    if not _base64(headers["PAYPAL-TRANSMISSION-SIG"]):
        return "The PAYPAL-TRANSMISSION-SIG header is not a PayPal signature."
    if headers["PAYPAL-AUTH-ALGO"] != AUTH_ALGO:
        return f"PayPal signs its webhooks {AUTH_ALGO}, not this."
    if not _paypal_cert_url(headers["PAYPAL-CERT-URL"]):
        return "The PAYPAL-CERT-URL header is not a PayPal certificate address."
    return None


def _transmission_time(text: str) -> datetime | None:
    if not TRANSMISSION_TIME.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text)  # "Z" and offsets read since Python 3.11
    except ValueError:  # month 13, hour 99
        return None


def _base64(text: str) -> bool:
    return (
        len(text) <= MAX_SIGNATURE_CHARS
        and len(text) % 4 == 0
        and BASE64.fullmatch(text) is not None
    )


def _transmission_key(site_id: str, transmission_id: str) -> str:
    """The cache key remembering that PayPal verified this transmission to this site."""
    return f"paypal-webhook-transmission:{site_id}:{transmission_id}"


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
    # The cheap checks first: headers and body, then the database, then PayPal.
    headers = {name: request.headers.get(name, "").strip() for name in HEADERS}
    missing = [name for name, value in headers.items() if not value]
    if missing:
        return _refuse(f"The webhook has no {', '.join(missing)} header.")
    problem = _not_paypals(headers, now=datetime.now(UTC))
    if problem is not None:
        return _refuse(problem)
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
    account = (
        RailAccount.objects.filter(site_id=site_id, rail=Rail.PAYPAL).select_related("site").first()
    )
    if account is None:
        return _refuse("PayPal is not connected to this site.")
    webhook_id = str((account.config or {}).get("webhook_id") or "")
    if not webhook_id:
        return _refuse("No PayPal webhook id is saved for this site (Settings → Rails).")
    # Asking PayPal costs a call with the merchant's credentials: never again for a
    # transmission it verified (a replay, whatever body it now carries) nor for an event
    # already stored (nothing would change), and at most the address's share and the site's
    # budget a minute (past them, PayPal is asked to deliver again later).
    transmission = _transmission_key(account.site_id, headers["PAYPAL-TRANSMISSION-ID"])
    if cache.get(transmission) is not None:
        return JsonResponse({"received": True, "duplicate": True})
    event_id = event["id"].strip()[:255]
    if WebhookEvent.objects.filter(site=account.site, rail=Rail.PAYPAL, event_id=event_id).exists():
        return JsonResponse({"received": True, "duplicate": True})
    try:
        share = spend_paypal_verification(site_id=account.site_id, address=client_address(request))
    except RateLimited as limited:
        response = JsonResponse(limited.as_dict(), status=limited.status)
        response["Retry-After"] = str(limited.retry_after)
        return response
    try:
        verified = client_for(account).verify_webhook_signature(
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
    return_paypal_verification(share)
    try:
        with transaction.atomic():
            stored = WebhookEvent.objects.create(
                site=account.site,
                rail=Rail.PAYPAL,
                event_id=event_id,
                type=event["event_type"][:100],
                payload=payload.decode("utf-8"),
            )
            enqueue_on_commit(
                "rails.process_paypal_event", stored.pk, recovered_by="rails.retry_webhook_events"
            )
    except IntegrityError:
        _remember(transmission)
        return JsonResponse({"received": True, "duplicate": True})
    _remember(transmission)
    return JsonResponse({"received": True, "duplicate": False})


def _remember(transmission: str) -> None:
    """Remember a verified transmission once its event is stored (not before: a delivery that
    failed to store must be verified again when PayPal retries it). For as long as its
    transmission time is accepted at all; past that, it is refused on its time.

    A saving, not a safeguard: forgotten (a flush, an eviction), a replay is verified again,
    and is a duplicate by its stored event id or, under another id PayPal verifies (the
    signature covers a CRC32 of the body, which a crafted body keeps), an event that changes
    nothing, since processing reads its refund or dispute again at PayPal."""
    ttl = MAX_TRANSMISSION_AGE + MAX_CLOCK_SKEW
    cache.set(transmission, 1, int(ttl.total_seconds()))


urlpatterns = [
    path("webhooks/paypal/<str:site_id>", paypal_webhook, name="paypal-webhook"),
]
