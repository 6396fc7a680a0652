"""A Stripe event whose processing really fails: the books cannot hold what it reports.

Sill's books say 60.00 of an 89.00 charge went back through Sill; Stripe then reports a
50.00 refund made outside Sill. Recording it would make the refunded total exceed the
charge (which the charge's check constraint would refuse), so processing raises
``sill.orders.outside.ExceedsCharge`` before writing anything. Correcting the books
(``books_agree``) lets it apply.
"""

from __future__ import annotations

import json
from typing import Any

from sill.orders.models import Charge
from tests.rails.stripe_events import event, refund_obj


def books_disagree(charge: Charge) -> None:
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_minor=6000)


def books_agree(charge: Charge) -> None:
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_minor=0)


def too_large_refund(
    charge: Charge, *, event_id: str = "evt_too_large", created: int | None = None
) -> bytes:
    obj = refund_obj(charge.provider_charge_id, refund_id="re_too_large", amount=5000)
    return event("refund.created", obj, event_id=event_id, created=created)


def too_large_refund_event(charge: Charge, **kwargs: Any) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(too_large_refund(charge, **kwargs))
    return decoded
