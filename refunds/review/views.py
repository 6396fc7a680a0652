"""Held refunds: the review queue, one refund's page, and the approve / reject forms.

Owners and admins decide; reviewers see the same pages without decision controls (and a POST
from them is 403); other sites' refunds are 404. Each form posts with or without JavaScript:
htmx gets the updated row or decision panel plus the nav counter (``hx-swap-oob``), a JSON
client gets the refund's state or ``{"error": ...}``, a plain form is redirected back with a
flash message.

Money moves only on a confirmed approval: a form POST without ``confirmed=1`` (what sill.js
adds once the dialog named by the form's ``data-confirm`` is confirmed) answers a confirmation
(200, nothing decided): the page ``refunds/held_confirm.html``, or for htmx its card in place
of the row or the decision panel. JSON callers are not forms and decide at once.

Live status: a row or panel whose refund is in flight (processing, needs attention) polls
``held-detail`` with htmx; the view picks the partial by ``HX-Target`` and renders it without
the trigger once the refund is settled, which stops the polling.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST, require_safe

from refunds.labels import (
    attention_words,
    failure_line,
    money_words,
    outcome_label,
    outcome_words,
    rail_label,
    refund_outcome_label,
    refused_approval,
)
from refunds.models import Refund, RefundStatus
from refunds.review import selectors
from refunds.review.decisions import approve_refund, deadline, reject_refund
from sill.accounts.access import Cap, site_view
from sill.error_pages import wants_json
from sill.errors import SillError
from sill.http import SiteRequest
from sill.paging import BoundedPaginator

HELD_PAGE_SIZE = 25


class Decide(Protocol):
    """``approve_refund`` or ``reject_refund``."""

    def __call__(self, *, refund: Refund, actor: Any, note: str = "") -> Refund: ...


@require_safe
@site_view(Cap.VIEW_HELD)
def held(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    filters = selectors.HeldFilters.from_query(request.GET)
    # A page of holds, oldest first (bounded work however many wait); groups within the page.
    page = BoundedPaginator(selectors.held_refunds_for(site, filters), HELD_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    rows = [selectors.held_row(r) for r in page.object_list]
    context = {
        "page": page,
        "rows": rows,
        "groups": selectors.group_by_order(rows),
        "filters": filters,
        "options": selectors.held_filter_options(site),
        "can_decide": request.site_ctx.can(Cap.DECIDE_HELD),
    }
    if request.htmx and request.htmx.target == "held-results":
        return render(request, "refunds/held.html#results", context)
    return render(request, "refunds/held.html", context)


@require_safe
@site_view(Cap.VIEW_HELD)
def held_detail(request: SiteRequest, refund_id: str) -> HttpResponse:
    refund = selectors.held_refund_for(request.site_ctx.site, refund_id)
    if request.htmx and str(request.htmx.target or "").startswith("held-row-"):
        # A decided row of the held list polls while its refund is in flight.
        context = {**_panel_context(request, refund), "message": _status_message(refund)}
        return render(request, "refunds/held.html#decided-row", context)
    if request.htmx and request.htmx.target == "decision-panel":
        # The panel polls while an approved refund executes on its rail.
        return render(
            request, "refunds/held_detail.html#panel-swap", _detail_context(request, refund)
        )
    return render(request, "refunds/held_detail.html", _detail_context(request, refund))


@require_POST
@site_view(Cap.DECIDE_HELD)
def approve(request: SiteRequest, refund_id: str) -> HttpResponse:
    return _decide(request, refund_id, approve_refund, done="Approved")


@require_POST
@site_view(Cap.DECIDE_HELD)
def reject(request: SiteRequest, refund_id: str) -> HttpResponse:
    return _decide(request, refund_id, reject_refund, done="Rejected")


def _decide(request: SiteRequest, refund_id: str, decide: Decide, *, done: str) -> HttpResponse:
    ctx = request.site_ctx
    refund = selectors.held_refund_for(ctx.site, refund_id)
    if decide is approve_refund and _needs_confirmation(request, refund):
        return _confirmation(request, refund)
    error: SillError | None = None
    try:
        decide(refund=refund, actor=ctx.user, note=request.POST.get("note", ""))
    except SillError as exc:
        error = exc
    refund = selectors.held_refund_for(ctx.site, refund_id)  # as it stands now
    message = error.message if error else _done_message(refund, done)
    status = error.status if error else 200

    if wants_json(request):
        if error:
            return JsonResponse(error.as_dict(), status=status)
        return JsonResponse(_refund_state(refund))
    if request.htmx:
        if str(request.htmx.target or "").startswith("held-row-"):
            context = {**_panel_context(request, refund), "message": message, "error": error}
            return render(request, "refunds/held.html#decided-row", context, status=status)
        context = {**_detail_context(request, refund), "message": message, "error": error}
        return render(request, "refunds/held_detail.html#panel-swap", context, status=status)
    if error is not None and error.status == 403:
        # Nothing changed: show the refund again with the reason, as a 403.
        context = {**_detail_context(request, refund), "message": message, "error": error}
        return render(request, "refunds/held_detail.html", context, status=403)
    (messages.error if error else messages.success)(request, message)
    return redirect(_next_url(request, refund))


def _needs_confirmation(request: SiteRequest, refund: Refund) -> bool:
    """A form's approval of a refund that is still held, not yet confirmed.

    Anything else goes to the decision, which refuses it without moving money (already
    decided, the requester approving, past its deadline though the sweep has not expired it
    yet) or is a JSON caller's (an API, not a form).
    """
    if wants_json(request) or request.POST.get("confirmed") == "1":
        return False
    requester = refund.requested_by_id is not None and refund.requested_by_id == request.user.pk
    overdue = timezone.now() >= deadline(refund)
    return refund.status == RefundStatus.HELD and not requester and not overdue


def _confirmation(request: SiteRequest, refund: Refund) -> HttpResponse:
    """What approving ``refund`` will do, to confirm (200; nothing was decided)."""
    context = {
        **_panel_context(request, refund),
        "note": request.POST.get("note", "")[:2000],
        "next": request.POST.get("next", ""),
        "cancel_url": _next_url(request, refund),
    }
    if request.htmx:
        target = str(request.htmx.target or "")
        part = "confirm-row" if target.startswith("held-row-") else "confirm-panel"
        return render(request, f"refunds/held_confirm.html#{part}", context)
    return render(request, "refunds/held_confirm.html", context)


def _status_message(refund: Refund) -> str:
    """A decided refund's state in words, as a polled row shows it."""
    _noun, done = money_words(refund)
    if refund.status == RefundStatus.NEEDS_ATTENTION or refund.decision == "approved":
        return _done_message(refund, "Approved")
    if refund.status == RefundStatus.EXPIRED:
        return f"Expired: nobody decided within 24 hours; nothing was {done}."
    if refund.status == RefundStatus.REJECTED:
        return f"Rejected: nothing was {done} ({refund_outcome_label(refund)})."
    return ""


def _done_message(refund: Refund, decided: str) -> str:
    """A decision's answer: what became of the refund, as it stands when the answer is built
    (a worker may already have executed an approval, and left it needing attention)."""
    rail = rail_label(refund.rail)
    noun, done = money_words(refund)
    if refund.status == RefundStatus.NEEDS_ATTENTION:
        return (
            f"{decided}: {attention_words(refund)}; "
            f"an owner can check it on {'its page' if refund.is_credit else 'the order'}."
        )
    where = f"to the customer's {rail} balance" if refund.is_credit else f"on {rail}"
    if refund.status == RefundStatus.SUCCEEDED:
        return f"{decided}: {refund.amount} was {done} {where}."
    if refund.status == RefundStatus.PROCESSING:
        return f"{decided}: {refund.amount} is being {done} {where}."
    if refund.status == RefundStatus.FAILED:
        # Sill's words, then the rail's, as the refund page and the order page say it.
        why = failure_line(*outcome_words(refund)).rstrip(".")
        return f"{decided}, but the rail refused the {noun}: {why}."
    return f"{decided}: nothing was {done}."


def _refund_state(refund: Refund) -> dict[str, Any]:
    return {
        "refund_id": refund.id,
        "status": refund.status,
        "decision": refund.decision,
        "reason": refund.outcome_code or None,
        "decided_by": refund.decided_by.get_username() if refund.decided_by is not None else None,
    }


def _next_url(request: HttpRequest, refund: Refund) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("refunds:held-detail", args=[refund.id])


def _panel_context(request: SiteRequest, refund: Refund) -> dict[str, Any]:
    ctx = request.site_ctx
    return {
        "refund": refund,
        "row": selectors.held_row(refund),
        "can_decide": ctx.can(Cap.DECIDE_HELD) and refund.status == RefundStatus.HELD,
        "is_requester": refund.requested_by_id is not None
        and refund.requested_by_id == ctx.user.pk,
    }


def _detail_context(request: SiteRequest, refund: Refund) -> dict[str, Any]:
    order = refund.order
    charge = refund.charge
    return {
        **_panel_context(request, refund),
        "order": order,
        "items": list(order.items.all()) if order else [],
        "charge": charge,
        "disputes": list(charge.disputes.order_by("-opened_at")) if charge else [],
        "charge_link": selectors.charge_link(charge),
        "prior_refunds": selectors.prior_refunds_for(refund),
        "facts": selectors.fact_rows(refund),
        "fact_phrases": selectors.fact_words(refund),
        "outcome": outcome_label(refund.outcome_code),
        # A failure in Sill's words and the rail's, as the refund page says it.
        "failure": outcome_words(refund) if refund.status == RefundStatus.FAILED else None,
        "attention": attention_words(refund),
        # An approval Sill refused (a dispute, less left, the rail off): said as one, not as
        # the outcome of the approver's own rejection.
        "refused": refused_approval(refund.outcome_code) if refund.decided_by_id else "",
        "records": selectors.decision_records_for(refund),
    }


urlpatterns: list[URLPattern] = [
    path("held/", held, name="held"),
    path("held/<str:refund_id>/", held_detail, name="held-detail"),
    path("held/<str:refund_id>/approve/", approve, name="held-approve"),
    path("held/<str:refund_id>/reject/", reject, name="held-reject"),
]
