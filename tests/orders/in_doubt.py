"""A purchase's charge that needs attention, made the way the rail leaves one."""

from __future__ import annotations

from django.test import override_settings

from sill.orders.charging import charge_order
from sill.orders.models import Charge, Order
from sill.rails.registry import ensure_mock_rail


def charge_in_doubt(order: Order) -> Charge:
    """``order``'s pending charge on the mock rail, left needing attention: the mock charges the
    buyer and the answer is lost, the one attempt allowed is used up, and the rail is then
    switched off, so the sweep's lookups can never answer either (only a person can)."""
    account = ensure_mock_rail(order.site)
    account.config = {"charge": "timeout_after_effect"}
    account.save()
    charge = Charge.objects.create(
        order=order,
        rail="mock",
        amount_minor=order.total_minor,
        currency=order.currency,
        payment_method="pm_card_visa",
    )
    with override_settings(SILL_CHARGE_MAX_ATTEMPTS=1):
        assert charge_order(order_id=order.pk) == "needs_attention"
    account.enabled = False
    account.save()
    return Charge.objects.select_related("order__site").get(pk=charge.pk)
