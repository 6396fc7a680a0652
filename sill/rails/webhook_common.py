"""What every rail's webhook endpoint shares: the refusal, the body limit, base64 HMACs.

Each rail's module (stripe_webhooks, shopify/webhooks, woocommerce/webhooks, paypal/webhooks)
verifies its own scheme; a refused delivery is 400 ``webhook_refused`` and records nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.http import JsonResponse

from sill.errors import SillError

# No rail's event comes near this; a larger body is refused before it is parsed.
MAX_BODY_BYTES = 512 * 1024


class WebhookRefused(SillError):
    code = "webhook_refused"
    status = 400


def refuse(message: str, *, code: str | None = None) -> JsonResponse:
    return JsonResponse(WebhookRefused(message, code=code).as_dict(), status=400)


def base64_hmac(payload: bytes, secret: str) -> str:
    """Base64 of the HMAC-SHA256 of ``payload`` under ``secret`` (Shopify's and WooCommerce's
    webhook signature)."""
    digest = hmac.new(secret.encode("utf-8"), payload, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def body_sha256(payload: bytes) -> str:
    """The hex sha256 of a signed body: what Shopify's and WooCommerce's deliveries are kept
    once by (``WebhookEvent.body_sha256``) besides their id.

    Their signature covers the body alone, not ``X-Shopify-Webhook-Id`` nor
    ``X-WC-Webhook-Delivery-ID``: whoever captured one delivery could send its body again
    under a fresh id, forever, each one a store read and a task. A genuine retry reuses its
    id, and two real changes differ in their bodies (Shopify's carry ``updated_at``, a refund
    or a dispute its own id and state; Woo's ``date_modified_gmt`` and the whole order), so a
    body seen before is a duplicate whatever its id says. The topic is left out: its header
    is not signed either, and a replay under invented ``orders/…`` topics would make new
    keys.
    """
    return hashlib.sha256(payload).hexdigest()


def verify_base64_hmac(payload: bytes, header: str, secrets: list[str]) -> bool:
    """Whether ``header`` signs ``payload`` under any of ``secrets`` (constant-time compare)."""
    given = header.strip().encode("ascii", "replace")
    found = False
    for secret in secrets:
        # Every secret is compared (no early exit), so timing says nothing about which.
        found |= hmac.compare_digest(base64_hmac(payload, secret).encode("ascii"), given)
    return found and bool(given)
