"""What the Reconciliation inbox reads, always scoped to one site."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.attention import attention_refunds_for
from sill.accounts.models import Site

RESOLVED_SHOWN = 50
# The inbox shows this many open differences a page, and the refunds waiting longest for
# attention (counted up to ATTENTION_COUNTED): its work does not grow with the backlog.
OPEN_PAGE_SIZE = 25
ATTENTION_SHOWN = 25
ATTENTION_COUNTED = 1000
RUNS_LOOKED_AT = 20


def open_items_for(site: Site) -> QuerySet[ReconciliationItem]:
    """The site's open differences, oldest first (one query with their orders or customers)."""
    return (
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=True)
        .select_related("order", "customer")
        .order_by("found_at", "id")
    )


def open_item_for(site: Site, item_id: int) -> ReconciliationItem | None:
    return open_items_for(site).filter(pk=item_id).first()


def resolved_items_for(site: Site) -> list[ReconciliationItem]:
    """The site's most recently resolved differences, newest first."""
    return list(
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=False)
        .select_related("order", "customer", "resolved_by")
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


@dataclass(frozen=True)
class Attention:
    """The refunds that need attention as the inbox shows them: the longest waiting first."""

    refunds: list[Refund]  # at most ATTENTION_SHOWN
    count: int  # all of them, up to ATTENTION_COUNTED
    more: bool  # more than ATTENTION_COUNTED

    def __bool__(self) -> bool:
        return bool(self.refunds)


def attention_for(site: Site) -> Attention:
    """The site's refunds that need attention: shown in the inbox, resolved on their order."""
    flagged = attention_refunds_for(site)
    counted = flagged.order_by()[: ATTENTION_COUNTED + 1].count()
    return Attention(
        refunds=list(flagged[:ATTENTION_SHOWN]),
        count=min(counted, ATTENTION_COUNTED),
        more=counted > ATTENTION_COUNTED,
    )
