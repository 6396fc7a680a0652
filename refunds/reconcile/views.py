"""The Reconciliation inbox, and refunds that need attention on the order page and dashboard.

``/reconcile/`` (owners and admins; reviewers and staff get 403) lists the site's open
differences with the rails, its refunds that need attention, and what was resolved; each
open item is resolved with ``POST /reconcile/<item id>/resolve/`` (an outcome and a note).
A refused resolution re-renders the page with the message beside that item's form (422, or
409 when someone resolved it first) and keeps what was typed; another site's item is 404.

Refunds that need attention: owners and admins see them (they hold money that may have
moved); only an owner records what the provider's dashboard shows
(``POST /refunds/<refund_id>/resolve/``, :mod:`refunds.reconcile.attention_views`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_POST, require_safe

from refunds.labels import (
    STATUS_LABELS,
    failure_line,
    humanize,
    outcome_words,
    rail_refund_state_label,
)
from refunds.models import ReconciliationItem, Refund, RefundStatus
from refunds.reconcile import runs, selectors
from refunds.reconcile.attention import attention_refunds_for
from refunds.reconcile.attention_form import AttentionForm, form_view
from refunds.reconcile.inbox import (
    NOTE_MAX_LENGTH,
    PERSON_RESOLUTIONS,
    RECONCILE_CAP,
    resolve_item,
)
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Role
from sill.errors import NotFound, SillError
from sill.http import SiteRequest
from sill.paging import BoundedPaginator
from sill.rails.dispute_states import dispute_status


def attention_context(
    request: SiteRequest, *, refunds: list[Any], form: AttentionForm | None = None
) -> dict[str, Any]:
    """For the order page: this order's refunds that need attention, if the viewer may see,
    each with its owner's form (``form``: the one posted, confirming or given back)."""
    ctx = request.site_ctx
    if not ctx.can(Cap.DECIDE_HELD):
        return {"visible": False}
    flagged = [r for r in refunds if getattr(r, "status", "") == RefundStatus.NEEDS_ATTENTION]
    return {
        "visible": bool(flagged),
        "refunds": flagged,
        # Each with what happened, in Sill's words then the rail's (labels.outcome_words).
        "items": [(refund, form_view(refund, form), outcome_words(refund)) for refund in flagged],
        "can_resolve": ctx.role == Role.OWNER,
        "credit": any(r.is_credit for r in flagged),
    }


def dashboard_attention(request: SiteRequest) -> list[tuple[Refund, str]]:
    """The site's refunds that need attention (at most 20), each with what happened in Sill's
    words then the rail's, as the order page says it."""
    ctx = request.site_ctx
    if not ctx.can(Cap.DECIDE_HELD):
        return []
    return [
        (refund, failure_line(*outcome_words(refund)))
        for refund in attention_refunds_for(ctx.site)[:20]
    ]


# --- the Reconciliation inbox -------------------------------------------------------------------


# Ids past PostgreSQL's bigint are no item (the URL converter takes any digits).
BIGINT_MAX = 2**63 - 1


@dataclass(frozen=True)
class ItemRow:
    """One open item as the page shows it, with its form's error and typed values."""

    item: ReconciliationItem
    sill_status: str
    rail_status: str
    error: str = ""
    error_field: str = ""
    note: str = ""
    resolution: str = ""


def _status_words(status: str) -> str:
    """A Sill refund's status, as the refund pages name it."""
    return STATUS_LABELS.get(status) or humanize(status) if status else ""


def _rail_words(item: ReconciliationItem) -> str:
    """What the rail says of it, as the order page's Transactions tab names a rail's refund
    (``requires_action`` is "Waiting for the buyer"); a balance transaction is made or not, so
    "succeeded" at the rail is a credit made; a dispute's word (PayPal's
    ``RESOLVED:RESOLVED_BUYER_FAVOUR``) as Sill's dispute state ("Lost")."""
    if not item.rail_status:
        return ""
    if item.is_credit and item.rail_status == "succeeded":
        return "Credited"
    if item.is_dispute:
        return str(dispute_status(item.rail_status).label)
    return rail_refund_state_label(item.rail_status)


def _inbox_context(request: SiteRequest, *, failed: ItemRow | None = None) -> dict[str, Any]:
    site = request.site_ctx.site
    page = BoundedPaginator(selectors.open_items_for(site), selectors.OPEN_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    items = list(page.object_list)
    if failed is not None and all(item.pk != failed.item.pk for item in items):
        items.insert(0, failed.item)  # the refused form shows its message on any page
    rows = []
    for item in items:
        row = ItemRow(
            item=item,
            sill_status=_status_words(item.sill_status),
            # A balance transaction is made or not: "succeeded" at the rail is a credit made.
            rail_status=_rail_words(item),
        )
        if failed is not None and failed.item.pk == item.pk:
            row = replace(
                failed, item=item, sill_status=row.sill_status, rail_status=row.rail_status
            )
        rows.append(row)
    return {
        "page": page,
        "rows": rows,
        "attention": selectors.attention_for(site),
        "resolved": selectors.resolved_items_for(site),
        "runs": selectors.latest_runs_for(site),
        "resolutions": [(r.value, r.label) for r in PERSON_RESOLUTIONS],
        "note_max": NOTE_MAX_LENGTH,
        "days": runs.reconcile_days(),
        "every": int(runs.run_interval().total_seconds() // 60),
        "tz": site.zone,
        "can_resolve_attention": request.site_ctx.role == Role.OWNER,
    }


@require_safe
@site_view(RECONCILE_CAP)
def inbox(request: SiteRequest) -> HttpResponse:
    return render(request, "reconcile/inbox.html", _inbox_context(request))


@require_POST
@site_view(RECONCILE_CAP)
def resolve_item_view(request: SiteRequest, item_id: int) -> HttpResponse:
    site = request.site_ctx.site
    if item_id > BIGINT_MAX:
        raise Http404("No such reconciliation item.")
    resolution = request.POST.get("resolution", "")
    note = request.POST.get("note", "")
    try:
        item = resolve_item(
            site=site, item_id=item_id, actor=request.user, resolution=resolution, note=note
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except SillError as exc:
        still_open = selectors.open_item_for(site, item_id)
        if still_open is None:
            messages.error(request, exc.message)
            context = _inbox_context(request)
        else:
            failed = ItemRow(
                item=still_open,
                sill_status="",
                rail_status="",
                error=exc.message,
                error_field=exc.field or "",
                note=note[: NOTE_MAX_LENGTH * 2],
                resolution=resolution,
            )
            context = _inbox_context(request, failed=failed)
        status = exc.status if exc.status in (403, 409) else 422
        return render(request, "reconcile/inbox.html", context, status=status)
    if item.customer is not None:
        about = f"the credit to {item.customer.email}"
    else:
        assert item.order is not None  # an item names a customer or an order (its CHECK)
        about = f"order #{item.order.number}"
    messages.success(
        request,
        f"Resolved \u201c{item.get_kind_display()}\u201d on {about}: "
        f"{item.get_resolution_display().lower()}.",
    )
    return redirect("refunds:reconcile")


urlpatterns = [
    path("reconcile/", inbox, name="reconcile"),
    path("reconcile/<int:item_id>/resolve/", resolve_item_view, name="reconcile-resolve"),
]
