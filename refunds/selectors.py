"""Reads of refunds, always scoped to a site."""

from __future__ import annotations

from refunds.models import Refund, RefundStatus
from sill.accounts.models import Site


def held_count_for(site: Site) -> int:
    return Refund.objects.filter(site=site, status=RefundStatus.HELD).count()
