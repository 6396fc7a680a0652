"""The evidence downloads of the refund page and of an agent-placed order's page: the
refund's or the purchase's bundle (audit/bundles.py)."""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_safe

from audit.bundles import purchase_bundle, refund_bundle
from refunds.models import Refund
from sill.accounts.access import Cap, site_view
from sill.errors import NotFound
from sill.http import SiteRequest
from sill.orders.models import Order


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
    return _download(bundle, name=refund_id)


@require_safe
@site_view(Cap.VIEW_ACTIVITY)
def purchase_evidence(request: SiteRequest, order_id: str) -> HttpResponse:
    """``/orders/<order_id>/evidence.json``: the bundle of the agent purchase that placed the
    order (its decision on the mandate and its charge's records), checked as a refund's is."""
    site = request.site_ctx.site
    if not Order.objects.filter(site=site, pk=order_id, placed_by_agent__isnull=False).exists():
        raise Http404("No order placed by an agent with this id on this site.")
    try:
        bundle = purchase_bundle(site=site, order_id=order_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return _download(bundle, name=order_id)


def _download(bundle: dict[str, Any], *, name: str) -> HttpResponse:
    response = HttpResponse(
        json.dumps(bundle, ensure_ascii=False, indent=2) + "\n",
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="sill-evidence-{name}.json"'
    return response
