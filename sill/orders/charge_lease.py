"""The lease on a pending charge: one execution at a time, fenced by a token.

A claim takes the lease by conditional UPDATE and returns a fresh *fencing token*; every later
write of that execution checks the token (``sill.orders.charging``), so a worker whose lease
lapsed and was taken over can no longer change the charge. The holder renews it while it waits
on the rail (:func:`renew_charge`, through ``sill.leases``).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from sill.orders.models import Charge, ChargeStatus, Order


def lease_seconds() -> int:
    default = getattr(settings, "SILL_EXECUTION_LEASE_SECONDS", 120)
    return int(getattr(settings, "SILL_CHARGE_LEASE_SECONDS", default))


class ChargeLeaseLost(Exception):
    """Another execution claimed the charge: this one may no longer change it."""


def claim_charge(charge_id: str, *, attempt: bool = True) -> str | None:
    """Take the pending charge's lease if nobody holds it; the new fencing token, or None.

    ``attempt``: the claim is an attempt at the rail and counts towards its limit; a person
    settling the charge (``sill.orders.charge_attention``) claims it without one.
    """
    now = timezone.now()
    token = secrets.token_hex(16)
    claimed = (
        Charge.objects.filter(pk=charge_id, status=ChargeStatus.PENDING)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(
            lease_until=now + timedelta(seconds=lease_seconds()),
            lease_token=token,
            attempts=F("attempts") + (1 if attempt else 0),
        )
    )
    return token if claimed == 1 else None


def renew_charge(charge_id: str, token: str) -> bool:
    """Extend the lease while a rail call runs (``sill.leases``); False when ``token`` no
    longer holds it (taken over, or the charge was settled)."""
    return (
        Charge.objects.filter(pk=charge_id, lease_token=token, status=ChargeStatus.PENDING)
        .exclude(lease_until__isnull=True)
        .update(lease_until=timezone.now() + timedelta(seconds=lease_seconds()))
        == 1
    )


def release_charge(charge_id: str, token: str, **fields: Any) -> bool:
    """Give the lease back, setting ``fields``; False when ``token`` no longer holds it."""
    return (
        Charge.objects.filter(pk=charge_id, lease_token=token, status=ChargeStatus.PENDING)
        .exclude(lease_until__isnull=True)
        .update(lease_until=None, **fields)
        == 1
    )


def mark_rail_attempted(charge_id: str, token: str, *, payment_account: str = "") -> bool:
    """Commit, before the rail call, that a charge may from now on exist at the rail, and, on
    the first such call, on which payment account (``RailAccount.payment_account`` of the key
    that calls; blank: unknown): a later attempt, or an owner settling the charge by hand,
    knows where the buyer may have been charged even after the site's key changed."""
    return (
        Charge.objects.filter(pk=charge_id, lease_token=token, status=ChargeStatus.PENDING)
        .exclude(lease_until__isnull=True)
        .update(
            rail_attempted_at=Coalesce(F("rail_attempted_at"), timezone.now()),
            payment_account=Case(
                When(rail_attempted_at__isnull=True, then=Value(payment_account)),
                default=F("payment_account"),
            ),
        )
        == 1
    )


def locked_for_update(charge_id: str, token: str) -> tuple[Order, Charge, bool]:
    """The order and its charge under row locks (order first, as refunds lock them), and
    whether ``token`` still holds the pending charge's lease. Call inside ``atomic()``."""
    order_id = Charge.objects.filter(pk=charge_id).values_list("order_id", flat=True).get()
    # The order's row alone (``of``): joined, the site's row would be locked FOR UPDATE until
    # the outcome appends, and any append of the site committing meanwhile (its foreign keys'
    # check share-locks that row while it holds the chain head) deadlocks with it.
    order = Order.objects.select_for_update(of=("self",)).select_related("site").get(pk=order_id)
    charge = Charge.objects.select_for_update().get(pk=charge_id)
    holds = (
        charge.lease_token == token
        and charge.lease_until is not None
        and charge.status == ChargeStatus.PENDING
    )
    return order, charge, holds
