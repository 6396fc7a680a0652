"""WooCommerce stores: their orders are paid on Stripe, so their refunds run on Stripe.

The site's ``woocommerce`` RailAccount holds the store: ``connected_account`` its URL, the
secret its REST consumer key and secret (JSON, encrypted), the webhook secrets the secret
the store signs deliveries with. It is no refund rail of its own: ``rail_from_account``
refuses, and Woo orders' charges are on rail ``stripe``. After Stripe confirms a refund of
such an order, Sill records it on the Woo order (record.py). See connect.py, sync.py,
webhooks.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sill.rails.base import Rail
from sill.rails.models import RailAccount

if TYPE_CHECKING:
    from sill.rails.registry import RailDisabled

NEEDS_STRIPE = (
    "This site's WooCommerce store takes its payments through Stripe, so its refunds run on "
    "Stripe, and Stripe is not connected: on Settings → Rails, save the store's Stripe secret "
    "key and switch the Stripe rail on."
)


def rail_from_account(account: RailAccount) -> Rail:
    from sill.rails.registry import RailDisabled

    raise RailDisabled(
        "WooCommerce moves no money for Sill: refunds of WooCommerce orders run on Stripe."
    )


def woocommerce_stripe_refusal(*, site_id: str, order_id: str) -> RailDisabled | None:
    """``RailDisabled`` (``rail_disabled``, words saying to connect Stripe) when ``order_id`` is
    a WooCommerce order of ``site_id`` and the site's Stripe rail is missing, off or keyless;
    ``None`` otherwise. The refund core calls it before its own rail check."""
    from sill.rails.registry import RailDisabled
    from sill.rails.woocommerce.models import WooOrderLink

    if not WooOrderLink.objects.filter(site_id=site_id, order_id=order_id).exists():
        return None
    stripe = RailAccount.objects.filter(site_id=site_id, rail="stripe", enabled=True).first()
    if stripe is None or not stripe.has_secret:
        return RailDisabled(NEEDS_STRIPE)
    return None
