"""Staff refunds on the order page, and Settings → Refund reasons.

Views parse input, check access, call one service and render. The refund form posts to
``refunds:order-refund``; while typing, htmx asks ``refunds:order-refund-preview`` for the
concrete amount. A percentage refund is only made when the form carries the amount the user
was shown (``confirmed_amount_minor``): without JavaScript, the first submit answers 422 with
that amount, and the second submit confirms it.

Each rendered form carries a fresh idempotency key (``idempotency_key``, a hidden field): a
double click or a browser retry of one form makes one refund, and the repeated submit answers
the first one's result page (``refunds.staff.idempotency``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from refunds.models import Refund, RefundReason, RefundStatus
from refunds.reasons import services as reasons
from refunds.reasons.selectors import reason_for, reason_picker_for, reason_tree_for
from refunds.services import charged_charge
from refunds.staff import api as api_staff
from refunds.staff import idempotency
from refunds.staff.services import (
    KINDS,
    ROUNDING_RULE,
    OrderSnapshot,
    create_staff_refund,
    parse_percentage,
    quote_staff_refund,
    refusal_for,
)
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Role
from sill.errors import SillError
from sill.money import Money, MoneyError, format_money, parse_major
from sill.orders.models import Charge, ChargeStatus, Order, Rail
from sill.orders.selectors import Transaction, order_for

FORM_FIELDS = (
    "kind",
    "amount",
    "percentage",
    "reason",
    "note",
    "expected_remaining_minor",
    "expected_refund_count",
    "confirmed_amount_minor",
)
NOTE_MAX = 1000
KEY_FIELD = "idempotency_key"
# How long a repeated submit waits for the first one's answer before it says "still running"
# (a browser that retries has usually dropped the first response, so it should get the result).
FORM_WAIT_SECONDS = 10.0


# --- the refund form on the order page ------------------------------------------------------


@dataclass
class RefundForm:
    """The submitted (or default) values, and what to tell the user about them."""

    data: dict[str, str] = field(default_factory=lambda: {"kind": "full"})
    error: SillError | None = None
    notice: str = ""


def _form_data(params: Any) -> dict[str, str]:
    data = {name: str(params.get(name, "")).strip()[:200] for name in FORM_FIELDS}
    data["note"] = str(params.get("note", "")).strip()[:NOTE_MAX]
    return data


def _parse(order: Order, data: dict[str, str]) -> tuple[str, Money | None, Decimal | None]:
    kind = data["kind"]
    if kind not in KINDS:
        raise SillError(
            "Choose a full, fixed-amount or percentage refund.", code="invalid_field", field="kind"
        )
    amount = percentage = None
    if kind == "amount":
        if not data["amount"]:
            raise SillError("Enter the amount to refund.", code="invalid_field", field="amount")
        try:
            amount = parse_major(data["amount"], order.currency)
        except MoneyError as exc:
            raise SillError(str(exc), code="invalid_field", field="amount") from None
    elif kind == "percentage":
        percentage = parse_percentage(data["percentage"])
    return kind, amount, percentage


def _snapshot(data: dict[str, str]) -> OrderSnapshot:
    def number(name: str) -> int | None:
        value = data.get(name, "")
        digits = value.removeprefix("-")
        # ASCII only: "²".isdigit() is True but int("²") raises, and Arabic-Indic digits read as 10.
        ok = digits.isascii() and digits.isdigit() and len(digits) <= 18
        return int(value) if ok else None

    return OrderSnapshot(
        remaining_minor=number("expected_remaining_minor"),
        refund_count=number("expected_refund_count"),
    )


def _first_charge(charges: list[Charge]) -> Charge | None:
    # The same charge as refunds.services.charged_charge, from the list the page loaded.
    return next((c for c in charges if c.status == ChargeStatus.SUCCEEDED), None)


def _preview_context(order: Order, charge: Charge | None, data: dict[str, str]) -> dict[str, Any]:
    kind = data.get("kind") or "full"
    context: dict[str, Any] = {"order": order, "quote": None, "preview_error": "", "hint": ""}
    if kind == "amount" and not data.get("amount"):
        context["hint"] = "Enter the amount to refund."
        return context
    if kind == "percentage" and not data.get("percentage"):
        context["hint"] = f"Enter a percentage of the {format_money(order.total)} order total."
        return context
    try:
        parsed_kind, amount, percentage = _parse(order, {**data, "kind": kind})
        context["quote"] = quote_staff_refund(
            order=order, charge=charge, kind=parsed_kind, amount=amount, percentage=percentage
        )
    except SillError as error:
        context["preview_error"] = error.message
    return context


def refund_panel_context(
    request: HttpRequest,
    *,
    order: Order,
    charges: list[Charge],
    transactions: list[Transaction],
    form: RefundForm | None = None,
) -> dict[str, Any]:
    """The refund panel of the order page, for whoever is looking (constant queries)."""
    ctx = request.site_ctx  # type: ignore[attr-defined]
    if not ctx.can(Cap.REFUND):
        return {"allowed": False, "show_hint": ctx.role == Role.STAFF}
    charge = _first_charge(charges)
    panel: dict[str, Any] = {
        "allowed": True,
        "order": order,
        "refusal": refusal_for(order, charge),
        "can_manage_reasons": ctx.can(Cap.MANAGE_SETTINGS),
    }
    if panel["refusal"] is not None:
        return panel
    assert charge is not None
    form = form or RefundForm()
    reasons.ensure_default_reasons(ctx.site)
    refunds = [t.obj for t in transactions if t.kind == "refund"]
    held = [r for r in refunds if isinstance(r, Refund) and r.status == RefundStatus.HELD]
    panel.update(
        form=form,
        data=form.data,
        remaining=charge.remaining,
        picker=reason_picker_for(ctx.site),
        # The snapshot is always fresh: after a refusal, submitting again is a deliberate act.
        expected_remaining_minor=charge.remaining.amount_minor,
        expected_refund_count=len(refunds),
        held_total=Money(sum(r.amount_minor for r in held), order.currency) if held else None,
        placeholder=Money.zero(order.currency).major_str(),
        # Fresh for every rendered form (and every re-render after a refusal).
        idempotency_key=idempotency.new_idempotency_key(),
        rounding_rule=ROUNDING_RULE,
        **_preview_context(order, charge, form.data),
    )
    return panel


def _render_form(
    request: HttpRequest, order: Order, form: RefundForm, *, status: int = 422
) -> HttpResponse:
    from sill.orders.views import order_detail_context

    context = order_detail_context(request, order, refund_form=form)
    template = "refunds/_refund_form.html#panel" if request.htmx else "orders/detail.html"
    return render(request, template, context, status=status)


def _rail_label(rail: str) -> str:
    return Rail(rail).label if rail in Rail.values else rail


def _outcome_message(request: HttpRequest, refund: Refund) -> None:
    amount = format_money(refund.amount)
    rail = _rail_label(refund.rail)
    if refund.status == RefundStatus.HELD:
        messages.warning(
            request,
            f"The refund of {amount} is held for review by an owner or admin "
            "(a rule asked for approval). Nothing moves until it is approved.",
        )
    elif refund.status == RefundStatus.REJECTED:
        rules = ", ".join(r.get("id", "") for r in refund.rules) or "a policy"
        messages.error(request, f"The refund of {amount} was refused by {rules}.")
    elif refund.status == RefundStatus.FAILED:
        messages.error(
            request, f"The refund of {amount} failed on the rail: {refund.failure_message}"
        )
    elif refund.status == RefundStatus.SUCCEEDED:
        messages.success(request, f"Refunded {amount} on {rail}.")
    else:
        messages.success(
            request,
            f"Refund of {amount} sent to {rail}; the Transactions tab shows "
            "it as pending until the rail confirms.",
        )


class _Unconfirmed(idempotency.NothingDecided):
    """A percentage refund whose concrete amount the user has not seen yet."""

    code = "amount_unconfirmed"
    status = 422


def _refund_result(request: HttpRequest, order: Order, refund: Refund) -> HttpResponse:
    refund.refresh_from_db()  # execution may already have settled it (eager tasks)
    _outcome_message(request, refund)
    return _to_transactions(request, order)


def _to_transactions(request: HttpRequest, order: Order) -> HttpResponse:
    url = reverse("orders:detail", args=[order.pk]) + "?tab=transactions"
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url, status=303)


@require_POST
@site_view(Cap.REFUND)
def order_refund(request: HttpRequest, order_id: str) -> HttpResponse:
    site = request.site_ctx.site  # type: ignore[attr-defined]
    order = order_for(site, order_id)
    form = RefundForm(data=_form_data(request.POST))
    try:
        # The form's own validation comes before the key is claimed, and stores nothing.
        kind, amount, percentage = _parse(order, form.data)
        key = idempotency.parse_idempotency_key(request.POST.get(KEY_FIELD), field=KEY_FIELD)
    except SillError as error:
        form.error = error
        return _render_form(request, order, form)

    def work(on_opened: Any) -> Refund:
        if kind == "percentage":
            # The user must have seen the concrete amount: htmx's preview put it in the form;
            # without JavaScript, this 422 shows it and the next submit confirms it.
            quote = quote_staff_refund(
                order=order, charge=charged_charge(order), kind=kind, percentage=percentage
            )
            if form.data["confirmed_amount_minor"] != str(quote.amount.amount_minor):
                raise _Unconfirmed(
                    f"{percentage} % comes to {format_money(quote.amount)}. Check it and press "
                    "Refund again to refund that amount."
                )
        return create_staff_refund(
            site=site,
            order=order,
            actor=request.user,
            kind=kind,  # type: ignore[arg-type]
            amount=amount,
            percentage=percentage,
            reason=form.data["reason"],
            note=form.data["note"],
            expected=_snapshot(form.data),
            on_opened=on_opened,
        )

    try:
        # A form rendered before keys existed has none: the order snapshot still guards it.
        if key is None:
            return _refund_result(request, order, work(None))
        answer = idempotency.run_idempotently(
            site=site,
            user=request.user,
            key=key,
            fingerprint=idempotency.request_fingerprint(
                method="POST", path=request.path, body=form.data
            ),
            work=work,
            respond=lambda refund: {"refund_id": refund.pk},
            success_status=303,
            wait_seconds=getattr(settings, "SILL_FORM_IDEMPOTENCY_WAIT_SECONDS", FORM_WAIT_SECONDS),
        )
    except _Unconfirmed as unconfirmed:
        form.notice = unconfirmed.message
        return _render_form(request, order, form)
    except idempotency.IdempotencyConflict:
        form.error = SillError(
            "This form was already submitted with other values; nothing was refunded by this "
            "submit. The form below is fresh: check it and press Refund again.",
            code=idempotency.IdempotencyConflict.code,
        )
        return _render_form(request, order, form)
    except idempotency.IdempotencyInFlight:
        messages.info(
            request,
            "This refund form was already submitted and is still being processed; its result "
            "appears in the Transactions tab.",
        )
        return _to_transactions(request, order)
    except SillError as error:
        form.error = error
        return _render_form(request, order, form)
    if "error" in answer.body:  # the first submit's refusal, answered again
        stored = answer.body["error"]
        form.error = SillError(stored["message"], code=stored["code"], field=stored["field"])
        return _render_form(request, order, form)
    refund = Refund.objects.get(site=site, pk=answer.body["refund_id"])
    return _refund_result(request, order, refund)


@require_GET
@site_view(Cap.REFUND)
def order_refund_preview(request: HttpRequest, order_id: str) -> HttpResponse:
    order = order_for(request.site_ctx.site, order_id)  # type: ignore[attr-defined]
    context = _preview_context(order, charged_charge(order), _form_data(request.GET))
    return render(request, "refunds/_refund_form.html#preview", context)


# --- Settings → Refund reasons ---------------------------------------------------------------


def _reasons_page(
    request: HttpRequest, *, error: SillError | None = None, status: int = 200
) -> HttpResponse:
    site = request.site_ctx.site  # type: ignore[attr-defined]
    reasons.ensure_default_reasons(site)
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


@require_GET
@site_view(Cap.MANAGE_SETTINGS)
def reasons_page(request: HttpRequest) -> HttpResponse:
    return _reasons_page(request)


def _parent_from(request: HttpRequest) -> RefundReason | None:
    value = request.POST.get("parent", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise SillError("Choose where the reason goes.", code="invalid_field", field="parent")
    return reason_for(request.site_ctx.site, int(value))  # type: ignore[attr-defined]


def _reason_action(request: HttpRequest, action: Any) -> HttpResponse:
    """Run one reason service; success → back to the page with a message, refusal → 422."""
    try:
        message = action()
    except SillError as error:
        return _reasons_page(request, error=error, status=422)
    messages.success(request, message)
    return HttpResponseRedirect(reverse("refunds:reasons"), status=303)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_add(request: HttpRequest) -> HttpResponse:
    def act() -> str:
        reason = reasons.add_reason(
            site=request.site_ctx.site,  # type: ignore[attr-defined]
            actor=request.user,
            name=request.POST.get("name", ""),
            parent=_parent_from(request),
            code=request.POST.get("code", ""),
        )
        return f"Added “{reason.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_rename(request: HttpRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)  # type: ignore[attr-defined]
    old = reason.name

    def act() -> str:
        renamed = reasons.rename_reason(
            reason=reason, actor=request.user, name=request.POST.get("name", "")
        )
        return f"Renamed “{old}” to “{renamed.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_move(request: HttpRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)  # type: ignore[attr-defined]

    def act() -> str:
        parent = _parent_from(request)
        reasons.move_reason(reason=reason, actor=request.user, parent=parent)
        where = f"under “{parent.name}”" if parent else "to the top level"
        return f"Moved “{reason.name}” {where}."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_deactivate(request: HttpRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)  # type: ignore[attr-defined]

    def act() -> str:
        reasons.set_reason_active(reason=reason, actor=request.user, active=False)
        return (
            f"Deactivated “{reason.name}”: it no longer appears in the refund form; "
            "past refunds keep it."
        )

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_reactivate(request: HttpRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)  # type: ignore[attr-defined]

    def act() -> str:
        reasons.set_reason_active(reason=reason, actor=request.user, active=True)
        return f"Reactivated “{reason.name}”."

    return _reason_action(request, act)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def reason_delete(request: HttpRequest, reason_id: int) -> HttpResponse:
    reason = reason_for(request.site_ctx.site, reason_id)  # type: ignore[attr-defined]
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
    path("orders/<str:order_id>/refund/", order_refund, name="order-refund"),
    path(
        "orders/<str:order_id>/refund/preview/",
        order_refund_preview,
        name="order-refund-preview",
    ),
    path(
        "api/order/<str:order_id>/refund",
        api_staff.StaffRefundCreateApi.as_view(),
        name="staff-refund-api",
    ),
]
