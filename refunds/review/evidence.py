"""The evidence download of the refund page: the refund's bundle (audit/bundles.py)."""

from __future__ import annotations

import json

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_safe

from audit.bundles import refund_bundle
from refunds.models import Refund
from sill.accounts.access import Cap, site_view
from sill.errors import NotFound
from sill.http import SiteRequest


@require_safe
@site_view(Cap.VIEW_ACTIVITY)
def refund_evidence(request: SiteRequest, refund_id: str) -> HttpResponse:
    """``/refunds/<refund_id>/evidence.json``: what ``audit/verify_export.py`` checks offline."""
    site = request.site_ctx.site
    if not Refund.objects.filter(site=site, pk=refund_id).exists():
        raise Http404("No such refund on this site.")
    try:
        bundle = refund_bundle(site=site, refund_id=refund_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    response = HttpResponse(
        json.dumps(bundle, ensure_ascii=False, indent=2) + "\n",
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="sill-evidence-{refund_id}.json"'
    return response
