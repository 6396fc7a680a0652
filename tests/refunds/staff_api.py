"""The staff refund API as tests call it: one full refund of an order under an idempotency key."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client


def post_full_refund(client: Client, order_id: str, *, reason_id: object, key: str) -> Any:
    """``POST /api/order/<order_id>/refund`` for the whole order, ``reason_id`` its reason."""
    return client.post(
        f"/api/order/{order_id}/refund",
        data=json.dumps({"full": True, "reasonId": str(reason_id)}),
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )
