"""Building and signing Stripe events the way Stripe does (localstripe sends no webhooks).

Stripe's documented scheme: ``Stripe-Signature: t=<unix time>,v1=<hex>`` where the hex is
HMAC-SHA256 under the endpoint's signing secret of ``f"{t}.{raw body}"``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from django.test import Client

from sill.accounts.models import Site
from sill.rails.models import RailAccount

SECRET = "whsec_test_current_0001"
OLD_SECRET = "whsec_test_previous_0001"


def v1(body: bytes, secret: str, t: int) -> str:
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def header(body: bytes, secret: str = SECRET, *, t: int | None = None) -> str:
    t = int(time.time()) if t is None else t
    return f"t={t},v1={v1(body, secret, t)}"


def event(
    event_type: str, obj: dict[str, Any], *, event_id: str, created: int | None = None, **extra: Any
) -> bytes:
    body = {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created": int(time.time()) if created is None else created,
        "livemode": False,
        "data": {"object": obj},
        **extra,
    }
    return json.dumps(body).encode()


def refund_obj(
    charge: str, *, refund_id: str = "re_outside_1", amount: int = 3000, **extra: Any
) -> dict[str, Any]:
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "currency": "usd",
        "charge": charge,
        "status": "succeeded",
        "metadata": {},
        "created": int(time.time()),
        **extra,
    }


def dispute_obj(
    charge: str, *, dispute_id: str = "dp_1", status: str = "needs_response", amount: int = 8900
) -> dict[str, Any]:
    return {
        "id": dispute_id,
        "object": "dispute",
        "amount": amount,
        "currency": "usd",
        "charge": charge,
        "reason": "fraudulent",
        "status": status,
        "created": int(time.time()),
    }


def stripe_account(site: Site, *, secrets: list[str] | None = None, **fields: Any) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", **fields)
    account.set_secret("sk_test_sill_webhooks_0001")
    account.set_webhook_secrets([SECRET] if secrets is None else secrets)
    account.save()
    return account


def post_event(site: Site, body: bytes, signature: str | None = None, client: Any = None) -> Any:
    """POST the event ``body`` to ``site``'s Stripe webhook, signed with the test secret unless
    ``signature`` is given; what it enqueues runs only if the caller captures it."""
    return (client or Client()).post(
        f"/webhooks/stripe/{site.pk}",
        data=body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=header(body) if signature is None else signature,
    )


def deliverer(capture: Any) -> Callable[..., Any]:
    """``deliver(site, body, header=None)``: POST the event and run what it enqueued."""
    client = Client(enforce_csrf_checks=True)

    def deliver(site: Site, body: bytes, signature: str | None = None) -> Any:
        with capture(execute=True):
            return post_event(site, body, signature, client)

    return deliver
