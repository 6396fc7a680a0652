"""Settings → Refund reasons: the site's reason tree, and one POST view per change.

Owners and admins only (``Cap.MANAGE_SETTINGS``). Each change calls one service of
``refunds.reasons.services``; a refusal re-renders the page with the message (422).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.views.decorators.http import require_POST, require_safe

from refunds.models import RefundReason
from refunds.reasons import services as reasons
from refunds.reasons.selectors import reason_for, reason_tree_for
from sill.accounts.access import Cap, site_view
from sill.errors import SillError
from sill.http import SiteRequest


def _reasons_page(
    request: SiteRequest, *, error: SillError | None = None, status: int = 200
) -> HttpResponse:
    # Read only: default reasons are seeded with the site (demo, the data migration), not here.
    site = request.site_ctx.site
    rows = reason_tree_for(site)
    return render(
        request,
        "refunds/reasons.html",
        {
            "rows": rows,
            "error": error,
            "pickable_count": sum(1 for r in rows if r.pickable),
        },
        status=status,
    )


@require_safe
@site_view(Cap.MANAGE_SETTINGS)
def reasons_page(request: SiteRequest) -> HttpResponse:
    return _reasons_page(request)


def _parent_from(request: SiteRequest) -> RefundReason | None:
    value = request.POST.get("parent", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise SillError("Choose where the reason goes.", code="invalid_field", field="parent")
    return reason_for(request.site_ctx.site, int(value))


def _reason_action(request: SiteRequest, action: Callable[[], str]) -> HttpResponse:
    """Run one reason service; success → back to the page with a message, refusal → 422."""
    try:
        message = action()
    except SillError as error:
        return _reasons_page(request, error=error, status=422)
    messages.success(request, message)
    return HttpResponseRedirect(reverse("refunds:reasons"), status=303)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_add(request: SiteRequest) -> HttpResponse:
    def act() -> str:
        reason = reasons.add_reason(
            site=request.site_ctx.site,
            actor=request.user,
            name=request.POST.get("name", ""),
            parent=_parent_from(request),
            code=request.POST.get("code", ""),
        )
        return f"Added “{reason.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_rename(request: SiteRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)
    old = reason.name

    def act() -> str:
        renamed = reasons.rename_reason(
            reason=reason, actor=request.user, name=request.POST.get("name", "")
        )
        return f"Renamed “{old}” to “{renamed.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_move(request: SiteRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)

    def act() -> str:
        parent = _parent_from(request)
        reasons.move_reason(reason=reason, actor=request.user, parent=parent)
        where = f"under “{parent.name}”" if parent else "to the top level"
        return f"Moved “{reason.name}” {where}."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_deactivate(request: SiteRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)

    def act() -> str:
        reasons.set_reason_active(reason=reason, actor=request.user, active=False)
        return (
            f"Deactivated “{reason.name}”: it no longer appears in the refund form; "
            "past refunds keep it."
        )

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_reactivate(request: SiteRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)

    def act() -> str:
        reasons.set_reason_active(reason=reason, actor=request.user, active=True)
        return f"Reactivated “{reason.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_delete(request: SiteRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)
    name = reason.name

    def act() -> str:
        reasons.delete_reason(reason=reason, actor=request.user)
        return f"Deleted “{name}”."

    return _reason_action(request, act)


urlpatterns = [
    path("settings/reasons/", reasons_page, name="reasons"),
    path("settings/reasons/add/", reason_add, name="reason-add"),
    path("settings/reasons/<int:reason_id>/rename/", reason_rename, name="reason-rename"),
    path("settings/reasons/<int:reason_id>/move/", reason_move, name="reason-move"),
    path(
        "settings/reasons/<int:reason_id>/deactivate/",
        reason_deactivate,
        name="reason-deactivate",
    ),
    path(
        "settings/reasons/<int:reason_id>/reactivate/",
        reason_reactivate,
        name="reason-reactivate",
    ),
    path("settings/reasons/<int:reason_id>/delete/", reason_delete, name="reason-delete"),
]
