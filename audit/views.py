"""Activity: the site's signed audit log, newest first, filterable, exportable.

``?kind=&refund=&from=&to=`` filter the records (``audit.activity.ActivityFilters``; days in
the site's time zone); ``?format=jsonl`` and ``?format=csv`` download every record under the
same filters, streamed in chain order. ``?verify=1`` checks the whole chain in the request
(unchanged here: moving it out of the request is its own change).
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from audit import activity, selectors
from audit.models import AuditKind
from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest

PAGE_SIZE = 50


@site_view(Cap.VIEW_ACTIVITY)
def activity_page(request: SiteRequest) -> HttpResponse | StreamingHttpResponse:
    site = request.site_ctx.site
    filters = activity.ActivityFilters.from_query(request.GET)
    records = activity.filtered_records(site, filters)
    export = request.GET.get("format", "")
    if export in ("jsonl", "csv"):
        stamp = timezone.localtime(timezone.now(), site.zone).strftime("%Y%m%d-%H%M")
        filename = f"activity-{site.pk}-{stamp}.{export}"
        if export == "jsonl":
            return activity.jsonl_response(records, filename=filename)
        return activity.csv_response(site, records, filename=filename)
    page = Paginator(records.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
    verification = selectors.chain_verification(site) if request.GET.get("verify") else None
    return render(
        request,
        "audit/activity.html",
        {
            "page": page,
            "rows": activity.rows_for(site, page.object_list),
            "filters": filters,
            "kind": filters.kind,
            "kinds": AuditKind.choices,
            "verification": verification,
        },
    )


app_name = "audit"
urlpatterns = [path("activity/", activity_page, name="activity")]
