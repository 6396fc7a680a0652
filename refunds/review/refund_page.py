"""The refund page (``refunds:detail``, ``/refunds/<refund_id>/``): every refund, any status.

Agent or staff, held or never held: the refund's timeline (``refunds.review.timeline``), the
original order, and the evidence download. Owners, admins and reviewers (who see the held
queue) and staff with the refund permission (who make refunds) may read it; staff without
it get 403, before any lookup, so the answer says nothing about another refund's existence.
Another site's refund is 404.

Live status: while the refund is processing or needs attention, the status panel polls this
page with htmx (``HX-Target: refund-status``); the view answers the ``#status`` partial, with
the timeline out of band, and once the refund has settled the partial comes back without its
trigger, which stops the polling.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_safe

from refunds.labels import (
    buyer_label,
    outcome_words,
    rail_label,
    reason_label,
    refund_status_label,
    rejection_words,
    requester_label,
)
from refunds.models import Refund, RefundOrigin, RefundStatus
from refunds.reconcile.attention_form import AttentionForm
from refunds.reconcile.views import attention_context
from refunds.review.timeline import timeline_for
from sill.accounts.access import Cap, SiteContext, site_view
from sill.accounts.models import Site
from sill.http import SiteRequest
from sill.money import format_money

# The statuses whose panel polls: money may still be moving.
LIVE = (RefundStatus.PROCESSING, RefundStatus.NEEDS_ATTENTION)
STATUS_TARGET = "refund-status"


def may_view_refunds(ctx: SiteContext) -> bool:
    """Who reads a refund's page: the held queue's readers, and those who make refunds."""
    return ctx.can(Cap.VIEW_HELD) or ctx.can(Cap.REFUND)


def refund_for(site: Site, refund_id: str) -> Refund:
    """A refund of ``site`` with everything its page shows, in one query; else 404."""
    refund = (
        Refund.objects.filter(site=site, pk=refund_id)
        .select_related("site", "order", "order__customer", "charge", "agent", "requested_by")
        .select_related("decided_by", "mandate", "order__placed_by_agent", "customer")
        .select_related("failure_handled_by")
        .first()
    )
    if refund is None:
        raise Http404("No such refund on this site.")
    return refund


def evidence_url(refund: Refund) -> str | None:
    """The evidence bundle's download, once ``refunds:evidence`` exists."""
    try:
        return reverse("refunds:evidence", args=[refund.pk])
    except NoReverseMatch:
        return None


def headline(refund: Refund) -> str:
    """``Staff refund of $12.00 · Damaged in transit`` (what it is, not what it may become)."""
    if refund.is_credit:
        kind = "Customer credit"
    else:
        kind = "Agent refund" if refund.origin == RefundOrigin.AGENT else "Staff refund"
    return f"{kind} of {format_money(refund.amount)} · {reason_label(refund)}"


@require_safe
@site_view(Cap.VIEW_ORDERS)
def refund_detail(request: SiteRequest, refund_id: str) -> HttpResponse:
    if not may_view_refunds(request.site_ctx):
        raise PermissionDenied
    refund = refund_for(request.site_ctx.site, refund_id)
    context = refund_page_context(request, refund)
    if request.htmx and request.htmx.target == STATUS_TARGET:
        return render(request, "refunds/detail.html#status-swap", context)
    return render(request, "refunds/detail.html", context)


def refund_page_context(
    request: SiteRequest, refund: Refund, *, attention_form: AttentionForm | None = None
) -> dict[str, Any]:
    """What the refund page shows; the owner's attention form re-renders the page with it
    (``attention_form``: its confirmation, or the form given back)."""
    # The evidence bundle and Activity are for those who read the audit log.
    reads_log = request.site_ctx.can(Cap.VIEW_ACTIVITY)
    return {
        **_context(refund),
        # A credit in doubt is resolved here: it has no order page to carry the form.
        "attention": attention_context(
            request, refunds=[refund] if refund.is_credit else [], form=attention_form
        ),
        "perms_activity": reads_log,
        "evidence_url": evidence_url(refund) if reads_log else None,
        # A failed refund nobody marked handled: owners and admins may (refunds.staff.handled).
        "handled_url": (
            reverse("refunds:failure-handled", args=[refund.pk])
            if refund.status == RefundStatus.FAILED
            and refund.failure_handled_at is None
            and request.site_ctx.can(Cap.DECIDE_HELD)
            else ""
        ),
    }


def _outcome(refund: Refund) -> dict[str, str]:
    if refund.status == RefundStatus.FAILED:
        outcome, detail = outcome_words(refund)
        return {"outcome": outcome, "outcome_detail": detail}
    return {"outcome": rejection_words(refund), "outcome_detail": ""}


def _context(refund: Refund) -> dict[str, Any]:
    order = refund.order
    return {
        "refund": refund,
        "headline": headline(refund),
        "status_label": refund_status_label(refund),
        # A failure in Sill's words and the rail's, as the order page says it.
        **_outcome(refund),
        "reason": reason_label(refund),
        "requester": requester_label(refund),
        "rail": rail_label(refund.rail),
        "live": refund.status in LIVE,
        "order": order,
        "buyer": buyer_label(order.buyer_name, order.buyer_email) if order else "",
        "customer": refund.customer,
        "charge": refund.charge,
        "timeline": timeline_for(refund),
        "was_held": refund.expires_at is not None,
    }
