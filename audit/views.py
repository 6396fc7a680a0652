"""Activity: the site's signed audit log, newest first, with on-demand chain verification."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import path

from audit import selectors
from audit.models import AuditKind, AuditRecord
from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest
from sill.money import Money, MoneyError

PAGE_SIZE = 50


@dataclass(frozen=True)
class ActivityRow:
    record: AuditRecord
    body: dict[str, Any]
    amount: Money | None
    by: str


def _row(record: AuditRecord) -> ActivityRow:
    try:
        body = json.loads(record.payload).get("body", {})
    except ValueError:  # shown as-is; `audit verify` reports the broken record
        body = {}
    amount = None
    if isinstance(body.get("amount_minor"), int) and isinstance(body.get("currency"), str):
        try:
            amount = Money(body["amount_minor"], body["currency"])
        except MoneyError:
            amount = None
    by = body.get("reviewer") or body.get("agent_id") or body.get("requested_by") or ""
    return ActivityRow(record=record, body=body, amount=amount, by=str(by))


@site_view(Cap.VIEW_ACTIVITY)
def activity(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    kind = request.GET.get("kind", "")
    records = selectors.records_for(site, kind=kind if kind in AuditKind.values else None)
    page = Paginator(records.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
    verification = selectors.chain_verification(site) if request.GET.get("verify") else None
    return render(
        request,
        "audit/activity.html",
        {
            "page": page,
            "rows": [_row(r) for r in page.object_list],
            "kind": kind if kind in AuditKind.values else "",
            "kinds": AuditKind.choices,
            "verification": verification,
        },
    )


app_name = "audit"
urlpatterns = [path("activity/", activity, name="activity")]
