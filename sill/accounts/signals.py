"""Signals the foundation sends for the apps built on it (which sill/ never imports)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside the transaction that created the site, by accounts.services.create_site, with
# ``site``: apps above seed what every site starts with (refunds: the default reasons).
site_created = Signal()
