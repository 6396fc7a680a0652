"""``manage.py rails sync-woocommerce --site S``: bad input is a CommandError, never a trace."""

from __future__ import annotations

from django.core.management.base import CommandError

from sill.accounts.models import Site
from sill.errors import SillError
from sill.rails.base import RailError
from sill.rails.woocommerce.orders import UnreadableOrder
from sill.rails.woocommerce.sync import sync_orders


def sync_woocommerce(*, site_id: str, full: bool = False) -> str:
    site = Site.objects.filter(pk=site_id).first()
    if site is None:
        raise CommandError(f"no site {site_id}")
    try:
        report = sync_orders(site=site, full=full)
    except (SillError, RailError) as exc:
        raise CommandError(exc.message) from None
    except UnreadableOrder as exc:
        raise CommandError(f"the store sent an order Sill cannot read: {exc}") from None
    return f"WooCommerce orders of site {site_id}: {report}"
