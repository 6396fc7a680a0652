"""What the Reconciliation inbox reads, always scoped to one site."""

from __future__ import annotations

from django.db.models import QuerySet

from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.attention import attention_refunds_for
from sill.accounts.models import Site

RESOLVED_SHOWN = 50
RUNS_LOOKED_AT = 20


def open_items_for(site: Site) -> QuerySet[ReconciliationItem]:
    """The site's open differences, oldest first (one query with their orders)."""
    return (
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=True)
        .select_related("order")
        .order_by("found_at", "id")
    )


def open_item_for(site: Site, item_id: int) -> ReconciliationItem | None:
    return open_items_for(site).filter(pk=item_id).first()


def resolved_items_for(site: Site) -> list[ReconciliationItem]:
    """The site's most recently resolved differences, newest first."""
    return list(
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=False)
        .select_related("order", "resolved_by")
        .order_by("-resolved_at", "-id")[:RESOLVED_SHOWN]
    )


def latest_runs_for(site: Site) -> list[ReconciliationRun]:
    """The latest run of each of the site's rails (one query)."""
    latest: dict[str, ReconciliationRun] = {}
    for run in ReconciliationRun.objects.filter(site=site).order_by("-started_at", "-id")[
        :RUNS_LOOKED_AT
    ]:
        latest.setdefault(run.rail, run)
    return sorted(latest.values(), key=lambda r: r.rail)


def attention_for(site: Site) -> list[Refund]:
    """The site's refunds that need attention: shown in the inbox, resolved on their order."""
    return list(attention_refunds_for(site))
