"""Activity: the site's signed audit log, newest first, filterable, exportable.

``?kind=&refund=&from=&to=`` filter the records (``audit.activity.ActivityFilters``; days in
the site's time zone); ``?format=jsonl`` and ``?format=csv`` download every record under the
same filters, streamed in chain order. "Verify chain" is a POST that starts a background
check of the whole log (audit/verification.py); the page shows the latest one and, while it
runs, polls its progress (``?part=verification``). No page request verifies the chain itself.
"""

from __future__ import annotations

from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from audit import activity
from audit.models import AuditKind
from audit.verification import latest_verification, start_verification
from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest
from sill.paging import BoundedPaginator

PAGE_SIZE = 50


@require_safe
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
    verification = latest_verification(site)
    if request.GET.get("part") == "verification":
        return render(request, "audit/activity.html#verification", {"verification": verification})
    page = BoundedPaginator(records.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
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


@require_POST
@site_view(Cap.VIEW_ACTIVITY)
def verify_start(request: SiteRequest) -> HttpResponse:
    """Start (or join) the background check of the whole log; it only reads."""
    verification = start_verification(site=request.site_ctx.site, actor=request.user)
    if request.htmx:
        return render(request, "audit/activity.html#verification", {"verification": verification})
    return redirect(f"{reverse('audit:activity')}#verification")


app_name = "audit"
urlpatterns = [
    path("activity/", activity_page, name="activity"),
    path("activity/verify/", verify_start, name="activity-verify"),
]
