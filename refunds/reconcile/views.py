"""Refunds that need attention on the order page and the dashboard, and an owner's resolution.

Owners and admins see them (they hold money that may have moved); only an owner records what
the provider's dashboard shows (``POST /refunds/<refund_id>/resolve/``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from refunds.models import Refund, RefundStatus
from refunds.reconcile.attention import attention_refunds_for, resolve_attention
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Role
from sill.errors import SillError
from sill.http import SiteRequest


def attention_context(request: SiteRequest, *, refunds: list[Any]) -> dict[str, Any]:
    """For the order page: this order's refunds that need attention, if the viewer may see."""
    ctx = request.site_ctx
    if not ctx.can(Cap.DECIDE_HELD):
        return {"visible": False}
    flagged = [r for r in refunds if getattr(r, "status", "") == RefundStatus.NEEDS_ATTENTION]
    return {"visible": bool(flagged), "refunds": flagged, "can_resolve": ctx.role == Role.OWNER}


def dashboard_attention(request: SiteRequest) -> list[Refund]:
    ctx = request.site_ctx
    if not ctx.can(Cap.DECIDE_HELD):
        return []
    return list(attention_refunds_for(ctx.site)[:20])


@require_POST
@site_view(Cap.DECIDE_HELD)
def resolve(request: SiteRequest, refund_id: str) -> HttpResponse:
    ctx = request.site_ctx
    refund = get_object_or_404(Refund.objects.select_related("site"), site=ctx.site, pk=refund_id)
    back = reverse("orders:detail", args=[refund.order_id])
    if ctx.role != Role.OWNER:
        raise PermissionDenied("Only an owner can record what the provider's dashboard shows.")
    try:
        resolved = resolve_attention(
            refund=refund,
            actor=request.user,
            outcome=request.POST.get("outcome", ""),
            provider_refund_id=request.POST.get("provider_refund_id", ""),
            note=request.POST.get("note", ""),
        )
    except SillError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    if resolved.status == RefundStatus.SUCCEEDED:
        messages.success(
            request, f"Recorded: {resolved.amount} was refunded ({resolved.provider_refund_id})."
        )
    else:
        messages.success(
            request, f"Recorded: nothing was refunded; {resolved.amount} is refundable again."
        )
    return redirect(back)


urlpatterns = [
    path("refunds/<str:refund_id>/resolve/", resolve, name="resolve-attention"),
]
