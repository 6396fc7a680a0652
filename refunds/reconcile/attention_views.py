"""An owner records what the provider's dashboard shows for a refund that needs attention.

``POST /refunds/<refund_id>/resolve/`` (``refunds:resolve-attention``), from the form under
the refund on its order page (a customer credit's: on its own page). Nothing is written
without ``confirmed=1``: a checked answer without it re-renders that page with the
confirmation in place of the form (200), **Change** (``edit=1``) gives the form back with what
was typed (:mod:`refunds.reconcile.attention_form`). A refusal, before or after confirming, is
said at the top of the page it redirects to. Admins see the refund, not the form (403 here);
another site's refund is 404.

Here rather than beside the inbox (:mod:`refunds.reconcile.views`): it renders the order page
and the refund page, whose views read that module.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from refunds.labels import money_words
from refunds.models import Refund, RefundStatus
from refunds.reconcile.attention import parse_attention_answer, resolve_attention
from refunds.reconcile.attention_form import AttentionForm, confirmation_for
from refunds.review.refund_page import refund_for, refund_page_context
from refunds.staff.views import order_detail_context
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Role
from sill.errors import SillError
from sill.http import SiteRequest
from sill.orders.selectors import order_for


@require_POST
@site_view(Cap.DECIDE_HELD)
def resolve(request: SiteRequest, refund_id: str) -> HttpResponse:
    ctx = request.site_ctx
    refund = get_object_or_404(Refund.objects.select_related("site"), site=ctx.site, pk=refund_id)
    back = (
        reverse("refunds:detail", args=[refund.id])
        if refund.is_credit
        else reverse("orders:detail", args=[refund.order_id])
    )
    if ctx.role != Role.OWNER:
        raise PermissionDenied("Only an owner can record what the provider's dashboard shows.")
    form = AttentionForm.from_post(refund.pk, request.POST)
    if request.POST.get("edit") == "1":  # "Change" on the confirmation: the form again
        return _render_page(request, refund, form)
    try:
        if request.POST.get("confirmed") != "1":
            # Money state changes only on a confirmed submit: say what it will do first.
            answer = parse_attention_answer(**form.values)
            if refund.status != RefundStatus.NEEDS_ATTENTION:
                raise SillError("This refund no longer needs attention.", code="already_resolved")
            return _render_page(request, refund, form.confirming(confirmation_for(refund, answer)))
        resolved = resolve_attention(refund=refund, actor=request.user, **form.values)
    except SillError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    done = money_words(resolved)[1]
    if resolved.status == RefundStatus.SUCCEEDED:
        messages.success(
            request, f"Recorded: {resolved.amount} was {done} ({resolved.provider_refund_id})."
        )
    elif resolved.is_credit:
        messages.success(request, "Recorded: nothing was credited.")
    else:
        messages.success(
            request, f"Recorded: nothing was refunded; {resolved.amount} is refundable again."
        )
    return redirect(back)


def _render_page(request: SiteRequest, refund: Refund, form: AttentionForm) -> HttpResponse:
    """The page that carries ``refund``'s form, with ``form`` in it."""
    site = request.site_ctx.site
    if refund.is_credit:
        context = refund_page_context(request, refund_for(site, refund.pk), attention_form=form)
        return render(request, "refunds/detail.html", context)
    assert refund.order_id is not None  # a refund, not a credit, names its order
    order = order_for(site, refund.order_id)
    context = order_detail_context(request, order, attention_form=form)
    return render(request, "orders/detail.html", context)
