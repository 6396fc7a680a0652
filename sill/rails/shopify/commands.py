"""``manage.py rails sync-shopify --site S [--since ISO]``: parsing and errors for the command."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import CommandError

from sill.accounts.models import Site
from sill.errors import SillError
from sill.rails.base import RailError
from sill.rails.shopify.sync import sync_orders


def sync_shopify(*, site_id: str, since: str | None) -> str:
    """Run the sync; returns the summary line, raises ``CommandError`` naming what failed."""
    site = Site.objects.filter(pk=site_id).first()
    if site is None:
        raise CommandError(f"no site {site_id}")
    start = None
    if since:
        try:
            start = datetime.fromisoformat(since.replace("Z", "+00:00"))
        except ValueError:
            raise CommandError(f"--since {since!r} is not an ISO 8601 time") from None
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
    try:
        report = sync_orders(site=site, since=start)
    except (SillError, RailError) as exc:
        raise CommandError(f"Shopify sync of site {site_id} failed: {exc.message}") from None
    return f"site {site_id}: {report}"
