"""The order page and the staff refund form on it.

Views parse input, check access, call one service and render. The page (``orders:detail``)
shows the order, its Transactions tab and the refund panel; the dashboard (``orders:dashboard``)
its headline figures. Their URL names stay under ``orders:`` (``refunds.staff.urls``).

The refund form posts to ``refunds:order-refund``; while typing, htmx asks
``refunds:order-refund-preview`` for the concrete amount. Money moves only on a submit with
``confirmed=1``: a valid submit without it answers (200, nothing written, the key unclaimed)
the confirmation in place of the form — the computed amount, the buyer, the rail and who
emails the buyer — whose **Refund** button posts the same fields, the same idempotency key,
the amount shown (``confirmed_amount_minor``) and ``confirmed=1``; **Change** gives the form
back. A percentage refund is still only made when the form carries the amount the user was
shown (``confirmed_amount_minor``), else 422 with that amount.

Each rendered form carries a fresh idempotency key (``idempotency_key``, a hidden field): a
double click or a browser retry of one form makes one refund, and the repeated submit answers
the first one's result page (``refunds.staff.idempotency``).

Under a purchase's charge that needs attention, an owner records what the rail's dashboard
shows (``orders:resolve-charge-attention``, ``refunds.staff.charge_attention``), confirmed the
same way before anything is written.

GET never writes: the reason picker reads the reasons the site was seeded with.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe
from django_htmx.http import HttpResponseClientRedirect

from audit.activity import purchase_approval_of, purchase_refusal_of
from refunds.labels import (
    buyer_label,
    money_confirmation,
    money_words,
    percent_text,
    rule_title,
)
from refunds.models import Refund, RefundStatus
from refunds.quote import charged_charge
from refunds.reasons.selectors import pickable_reason, reason_picker_for
from refunds.reconcile.attention_form import AttentionForm
from refunds.reconcile.views import attention_context, dashboard_attention
from refunds.staff import idempotency
from refunds.staff.charge_attention import (
    ChargeAttentionForm,
    charge_attention_context,
    confirmation_for,
    dashboard_charge_count,
    dashboard_charges,
    outcome_message,
)
from refunds.staff.dashboard import dashboard_context
from refunds.staff.forms import StaffConfirmation, StaffRefundForm, parse_refund_size
from refunds.staff.handled import mark_failure_handled
from refunds.staff.listing import ListFilters, orders_with_refund_state
from refunds.staff.order_status import order_refunds, refund_status_area
from refunds.staff.selectors import Transaction, dashboard_figures, transactions_for
from refunds.staff.services import (
    ROUNDING_RULE,
    create_staff_refund,
    quote_staff_refund,
    refusal_for,
)
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Role
from sill.errors import SillError
from sill.http import SiteRequest
from sill.money import Money, format_money
from sill.orders.charge_attention import parse_resolution, resolve_charge_attention
from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus
from sill.orders.selectors import order_for, pending_charge_of
from sill.rails.base import rail_label
from sill.rails.models import RailAccount
from sill.rails.registry import (
    RailDisabled,
    account_moved,
    account_noun,
    account_rail,
    account_refusal,
    payment_account_moved,
    rail_refusal,
    site_rail_accounts,
    usable_rail_account,
)
from sill.rails.woocommerce.record import woocommerce_records_for

KEY_FIELD = "idempotency_key"
# How long a repeated submit waits for the first one's answer before it says "still running"
# (a browser that retries has usually dropped the first response, so it should get the result).
FORM_WAIT_SECONDS = 10.0


# --- the dashboard and the order page --------------------------------------------------------


@require_safe
@site_view(Cap.VIEW_ORDERS)
def dashboard(request: SiteRequest) -> HttpResponse:
    """The to-do strip, 30 days of refunds as charts, the setup checklist and recent orders."""
    ctx = request.site_ctx
    recent = orders_with_refund_state(ctx.site, ListFilters())[:8]
    charges = dashboard_charges(ctx)
    context = {
        "recent": recent,
        "attention": dashboard_attention(request),
        "attention_charges": charges,
        **dashboard_figures(ctx.site),
        **dashboard_context(ctx, charges_needing_attention=dashboard_charge_count(charges)),
    }
    return render(request, "orders/dashboard.html", context)


def order_detail_context(
    request: SiteRequest,
    order: Order,
    *,
    tab: str = "overview",
    refund_form: StaffRefundForm | None = None,
    charge_form: ChargeAttentionForm | None = None,
    attention_form: AttentionForm | None = None,
) -> dict[str, Any]:
    """What the order page shows; the refund, charge-attention and refund-attention POST
    views re-render the page with it (their form's confirmation, or its refusal)."""
    charges = list(order.charges.prefetch_related("disputes"))
    # The site's rail accounts, read once for all the charges (not at all without one).
    accounts = site_rail_accounts(order.site_id) if charges else {}
    transactions = transactions_for(order)
    refunds = [t.obj for t in transactions if t.kind == "refund"]
    for charge in charges:
        # Held refunds reserve nothing until approved, yet no new refund may take their
        # amount: the card says how much of what is refundable they wait on.
        held = sum(
            r.amount_minor for r in refunds
            if isinstance(r, Refund) and r.charge_id == charge.pk and r.status == RefundStatus.HELD
        )  # fmt: skip
        charge.held_for_review = Money(held, charge.currency) if held else None  # type: ignore[attr-defined]
        # Taken on an account the site is no longer connected to (a Shopify shop or WooCommerce
        # store it switched away from, a Stripe account whose key it replaced): the card says
        # so, to everyone who sees the order, not only to refunders.
        charge.account_moved = account_moved(  # type: ignore[attr-defined]
            rail=charge.rail,
            provider_account=charge.provider_account,
            account=accounts.get(account_rail(charge.rail)),
        ) or payment_account_moved(
            rail=charge.rail,
            payment_account=charge.payment_account,
            account=accounts.get(charge.rail),
        )
        charge.account_noun = account_noun(charge.rail)  # type: ignore[attr-defined]
        # Something left to refund, and its rail switched off or its stored key unreadable:
        # every refund of it is refused (the confirmation refuses it), which the card says to
        # everyone who sees the order, as for a moved account.
        charge.rail_refused = (  # type: ignore[attr-defined]
            account_refusal(accounts.get(charge.rail), rail=charge.rail)
            if charge.status == ChargeStatus.SUCCEEDED and charge.remaining.amount_minor > 0
            else None
        )
    refusal = (
        purchase_refusal_of(order)
        if not charges and order.status == OrderStatus.CANCELLED and order.placed_by_agent_id
        else None
    )
    evidence = bool(order.placed_by_agent_id) and request.site_ctx.can(Cap.VIEW_ACTIVITY)
    woo_records = woocommerce_records_for(order)
    for record in woo_records:
        # Written on the Woo order, then Stripe reported the refund failed (the money came
        # back): the Woo order says refunded until the merchant deletes it there.
        record.reversed = any(  # type: ignore[attr-defined]
            isinstance(r, Refund) and r.pk == record.refund_id and r.reversed_at is not None
            for r in refunds
        )
    return {
        "order": order,
        "status_area": refund_status_area(request.site_ctx, refunds),
        "items": list(order.items.all()),
        "charges": charges,
        "transactions": transactions,
        "tab": tab,
        "attention": attention_context(
            request,
            refunds=[t.obj for t in transactions if t.kind == "refund"],
            form=attention_form,
        ),
        "refund_panel": refund_panel_context(
            request,
            order=order,
            charges=charges,
            transactions=transactions,
            accounts=accounts,
            form=refund_form,
        ),
        # Where a rail is switched on or its key re-entered, for whoever may.
        "rail_settings_url": reverse("settings:rails")
        if request.site_ctx.can(Cap.MANAGE_SETTINGS)
        else "",
        # A WooCommerce order: whether each refund was recorded on the Woo order too.
        "woocommerce_records": woo_records,
        # A purchase's charge that needs attention: an owner's form under it.
        "charge_attention": charge_attention_context(request.site_ctx, form=charge_form),
        # An agent's purchase Sill refused at intake: why there is no charge (its signed
        # record). Looked up only for an uncharged, cancelled order an agent placed.
        "purchase_refusal": refusal,
        # An agent's purchase: its evidence bundle, for those who read the audit log (as a
        # refund's on the refund page), beside the approval it holds (a refusal is said
        # under Charges already).
        "evidence_url": reverse("orders:evidence", args=[order.pk]) if evidence else "",
        "purchase_approval": purchase_approval_of(order) if evidence and not refusal else None,
    }


@require_safe
@site_view(Cap.VIEW_ORDERS)
def order_detail(request: SiteRequest, order_id: str) -> HttpResponse:
    """The order page; ``?part=status`` answers only its refund status area (htmx polls it
    every 3 s while a refund is in flight; the answer without a trigger stops the polling)."""
    order = order_for(request.site_ctx.site, order_id)
    if request.GET.get("part") == "status":
        area = refund_status_area(request.site_ctx, order_refunds(order))
        return render(
            request,
            "orders/detail.html#refund_status",
            # status_poll: the order's status badge follows, swapped out of band.
            {"order": order, "status_area": area, "status_poll": True},
        )
    tab = "transactions" if request.GET.get("tab") == "transactions" else "overview"
    context = order_detail_context(request, order, tab=tab)
    if request.htmx and request.htmx.target == "order-tab":
        return render(request, f"orders/detail.html#{tab}", context)
    return render(request, "orders/detail.html", context)


# --- a purchase's charge that needs attention -----------------------------------------------


@require_POST
@site_view(Cap.DECIDE_HELD)
def resolve_charge(request: SiteRequest, order_id: str) -> HttpResponse:
    """An owner records what the rail's dashboard shows for the order's charge that needs
    attention (``refunds.staff.charge_attention``): confirmed, 303 to the order page."""
    ctx = request.site_ctx
    order = order_for(ctx.site, order_id)
    if ctx.role != Role.OWNER:
        raise PermissionDenied("Only an owner can record what the rail's dashboard shows.")
    form = ChargeAttentionForm.from_post(request.POST)
    if request.POST.get("edit") == "1":  # "Change" on the confirmation: the form again
        return _render_charge_form(request, order, form, status=200)
    charge = pending_charge_of(order)
    try:
        if charge is None or not charge.needs_attention:
            raise SillError(
                "This order's charge no longer needs attention."
                if charge is None
                else "This order's charge does not need attention: Sill is still trying it.",
                code="already_resolved",
                status=409,
            )
        resolution = parse_resolution(**form.values)
        if request.POST.get("confirmed") != "1":
            # Money state changes only on a confirmed submit: say what it will do first.
            confirmation = confirmation_for(order, charge, resolution)
            return _render_charge_form(request, order, form.confirming(confirmation), status=200)
        settled = resolve_charge_attention(charge=charge, actor=request.user, **form.values)
    except SillError as error:
        if charge is not None and Charge.objects.get(pk=charge.pk).needs_attention:
            form = form.refused(error)
        else:  # no form to show it beside any more
            messages.error(request, error.message)
        status = 409 if error.status == 409 else 422
        return _render_charge_form(request, order, form, status=status)
    messages.success(request, outcome_message(order, settled))
    return HttpResponseRedirect(reverse("orders:detail", args=[order.pk]), status=303)


# --- a failed refund an owner or admin marks handled ----------------------------------------


@require_POST
@site_view(Cap.DECIDE_HELD)
def mark_handled(request: SiteRequest, refund_id: str) -> HttpResponse:
    """Take a failed refund off the to-do lists (``refunds.staff.handled``); back to its
    order page (a credit's: its own page) with what was done, or why not."""
    refund = get_object_or_404(
        Refund.objects.select_related("site"), site=request.site_ctx.site, pk=refund_id
    )
    back = (
        reverse("refunds:detail", args=[refund.pk])
        if refund.is_credit
        else reverse("orders:detail", args=[refund.order_id])
    )
    try:
        handled = mark_failure_handled(
            refund=refund, actor=request.user, note=request.POST.get("note", "")
        )
    except SillError as error:
        messages.error(request, error.message)
        return HttpResponseRedirect(back)
    messages.success(
        request,
        f"Marked handled: the failed {format_money(handled.amount)} "
        f"{money_words(handled)[0]} is off the to-do lists.",
    )
    return HttpResponseRedirect(back)


def _render_charge_form(
    request: SiteRequest, order: Order, form: ChargeAttentionForm, *, status: int
) -> HttpResponse:
    context = order_detail_context(request, order, charge_form=form)
    return render(request, "orders/detail.html", context, status=status)


# --- the refund form on the order page ------------------------------------------------------


def _first_charge(charges: list[Charge]) -> Charge | None:
    # The same charge as refunds.services.charged_charge, from the list the page loaded.
    return next((c for c in charges if c.status == ChargeStatus.SUCCEEDED), None)


def _preview_context(
    order: Order,
    charge: Charge | None,
    data: dict[str, str],
    *,
    rail_refused: RailDisabled | None = None,
) -> dict[str, Any]:
    """The live amount; ``rail_refused``: what the charge's rail refuses, said in its place (a
    page opened before the rail was switched off or its key became unreadable)."""
    kind = data.get("kind") or "full"
    context: dict[str, Any] = {"order": order, "quote": None, "preview_error": "", "hint": ""}
    if kind == "amount" and not data.get("amount"):
        context["hint"] = "Enter the amount to refund."
        return context
    if kind == "percentage" and not data.get("percentage"):
        context["hint"] = f"Enter a percentage of the {format_money(order.total)} order total."
        return context
    try:
        size = parse_refund_size(
            kind=kind,
            amount=data.get("amount", ""),
            percentage=data.get("percentage", ""),
            currency=order.currency,
        )
        quote = quote_staff_refund(
            order=order,
            charge=charge,
            kind=size.kind,
            amount=size.amount,
            percentage=size.percentage,
        )
    except SillError as error:
        context["preview_error"] = error.message
        return context
    if rail_refused is not None:  # what the confirmation refuses after the quote
        context["preview_error"] = rail_refused.message
    else:
        context["quote"] = quote
    return context


def refund_panel_context(
    request: SiteRequest,
    *,
    order: Order,
    charges: list[Charge],
    transactions: list[Transaction],
    accounts: dict[str, RailAccount],
    form: StaffRefundForm | None = None,
) -> dict[str, Any]:
    """The refund panel of the order page, for whoever is looking (constant queries);
    ``accounts``: the site's rail accounts, as the page read them."""
    ctx = request.site_ctx
    if not ctx.can(Cap.REFUND):
        return {"allowed": False, "show_hint": ctx.role == Role.STAFF}
    charge = _first_charge(charges)
    # Switched off or its stored key unreadable: the confirmation would refuse every refund.
    rail_refused = account_refusal(accounts.get(charge.rail), rail=charge.rail) if charge else None
    refusal = refusal_for(order, charge, rail_refused=rail_refused)
    refunds = [t.obj for t in transactions if t.kind == "refund"]
    # Awaiting approval: they count against what is left (refunds.quote), each one linked.
    holds = (
        [
            r
            for r in refunds
            if isinstance(r, Refund) and r.status == RefundStatus.HELD and r.charge_id == charge.pk
        ]
        if charge is not None
        else []
    )
    panel: dict[str, Any] = {
        "allowed": True,
        "order": order,
        "refusal": refusal,
        # The rail's refusal, whose fix is on Settings → Rails (linked for whoever may).
        "rail_refused": rail_refused is not None and refusal == rail_refused.message,
        "charge_rail": charge.rail if charge is not None else "",
        "holds": holds,
        # Staff with the refund permission cannot open /held/: their link is the refund page.
        "can_view_held": ctx.can(Cap.VIEW_HELD),
        "can_manage_reasons": ctx.can(Cap.MANAGE_SETTINGS),
    }
    if panel["refusal"] is not None:
        return panel
    assert charge is not None
    form = form or StaffRefundForm(currency=order.currency)
    preview = _preview_context(order, charge, form.values)
    if form.error is not None and form.error.field in ("amount", "percentage"):
        # Said once, beside its field (which names it in aria-describedby), not again here.
        preview.update(preview_error="", hint="")
    held_minor = sum(r.amount_minor for r in holds)
    remaining = Money(charge.remaining.amount_minor - held_minor, charge.currency)
    panel.update(
        form=form,
        data=form.values,
        remaining=remaining,
        picker=reason_picker_for(ctx.site),
        # The snapshot is always fresh: after a refusal, submitting again is a deliberate act.
        expected_remaining_minor=remaining.amount_minor,
        expected_refund_count=len(refunds),
        held_total=Money(held_minor, order.currency) if holds else None,
        placeholder=Money.zero(order.currency).major_str(),
        # Fresh for every rendered form (and every re-render after a refusal).
        idempotency_key=idempotency.new_idempotency_key(),
        rounding_rule=ROUNDING_RULE,
        **preview,
    )
    return panel


def _render_form(
    request: SiteRequest, order: Order, form: StaffRefundForm, *, status: int = 422
) -> HttpResponse:
    context = order_detail_context(request, order, refund_form=form)
    template = "refunds/_refund_form.html#panel" if request.htmx else "orders/detail.html"
    return render(request, template, context, status=status)


def _rule_names(refund: Refund, action: str) -> str:
    """The titles of the rules that took ``action`` (else of every rule that fired), quoted."""
    fired = [r for r in refund.rules or [] if isinstance(r, dict)]
    chosen = [r for r in fired if r.get("action") == action] or fired
    return ", ".join(f"“{rule_title(str(r.get('id', '')))}”" for r in chosen) or "“a rule”"


def _outcome_message(request: SiteRequest, refund: Refund, *, replayed: bool = False) -> None:
    """What became of ``refund``; ``replayed``: the form was submitted again (Back, a double
    click), which answered the first submit's refund and made nothing new, as said first."""
    amount = format_money(refund.amount)
    rail = rail_label(refund.rail)
    again = (
        "This refund form was already submitted: nothing more was refunded. " if replayed else ""
    )
    if refund.status == RefundStatus.HELD:
        messages.warning(
            request,
            f"{again}The refund of {amount} is held for review by an owner or admin "
            f"(your rule {_rule_names(refund, 'require_approval')} asked for approval). "
            "Nothing moves until it is approved.",
        )
    elif refund.status == RefundStatus.REJECTED:
        rules = _rule_names(refund, "deny")
        messages.error(
            request,
            f"{again}The refund of {amount} was denied by your rule {rules}; nothing moved.",
        )
    elif refund.status == RefundStatus.FAILED:
        messages.error(
            request, f"{again}The refund of {amount} failed on the rail: {refund.failure_message}"
        )
    elif refund.status == RefundStatus.SUCCEEDED:
        messages.success(request, f"{again}Refunded {amount} on {rail}.")
    else:
        messages.success(
            request,
            f"{again}Refund of {amount} sent to {rail}; the Transactions tab shows "
            "it as processing until the rail confirms.",
        )


class _Unconfirmed(idempotency.NothingDecided):
    """A percentage refund whose concrete amount the user has not seen yet."""

    code = "amount_unconfirmed"
    status = 422


def _refund_result(
    request: SiteRequest, order: Order, refund: Refund, *, replayed: bool = False
) -> HttpResponse:
    refund.refresh_from_db()  # execution may already have settled it (eager tasks)
    _outcome_message(request, refund, replayed=replayed)
    return _to_transactions(request, order)


def _to_transactions(request: SiteRequest, order: Order) -> HttpResponse:
    url = reverse("orders:detail", args=[order.pk]) + "?tab=transactions"
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url, status=303)


def _confirm(
    request: SiteRequest, order: Order, form: StaffRefundForm, *, key: str | None
) -> HttpResponse:
    """The confirmation of a valid refund (200, nothing written), or the form's refusal (422)."""
    size = form.size
    assert size is not None
    charge = charged_charge(order)
    try:
        quote = quote_staff_refund(
            order=order,
            charge=charge,
            kind=size.kind,
            amount=size.amount,
            percentage=size.percentage,
            # A form opened before another refund landed is refused here, not after the
            # user confirmed an amount the refund would then refuse as stale.
            expected=form.snapshot(),
        )
        assert charge is not None  # the quote refuses an order without one
        # What the refund itself would refuse before deciding, refused before confirming.
        pickable_reason(request.site_ctx.site, form.values["reason"])
        usable_rail_account(site_id=order.site_id, rail=charge.rail)
    except SillError as error:
        form.error = error
        return _render_form(request, order, form)
    buyer = buyer_label(order.buyer_name, order.buyer_email)
    fields = {
        **{name: value for name, value in form.values.items() if value},
        "confirmed_amount_minor": str(quote.amount.amount_minor),
    }
    form.confirmation = StaffConfirmation(
        amount=quote.amount,
        explanation=quote.explanation,
        buyer=buyer,
        rail=rail_label(charge.rail),
        sentence=money_confirmation(
            amount=quote.amount, buyer=buyer, rail=charge.rail, email=order.buyer_email
        ),
        fields=fields,
        idempotency_key=key or idempotency.new_idempotency_key(),
    )
    return _render_form(request, order, form, status=200)


@require_POST
@site_view(Cap.REFUND)
def order_refund(request: SiteRequest, order_id: str) -> HttpResponse:
    site = request.site_ctx.site
    order = order_for(site, order_id)
    form = StaffRefundForm(request.POST, currency=order.currency)
    # The form's own validation comes before the key is claimed, and stores nothing.
    if not form.is_valid():
        return _render_form(request, order, form)
    try:
        key = idempotency.parse_idempotency_key(request.POST.get(KEY_FIELD), field=KEY_FIELD)
    except SillError as error:
        form.error = error
        return _render_form(request, order, form)
    size = form.size
    assert size is not None
    values = form.values
    if request.POST.get("edit") == "1":  # "Change" on the confirmation: the form again
        return _render_form(request, order, form, status=200)
    if request.POST.get("confirmed") != "1":
        # Money moves only on a confirmed submit: answer the computed amount to confirm.
        return _confirm(request, order, form, key=key)

    def work(on_opened: Any) -> Refund:
        if size.kind == "percentage" and size.percentage is not None:
            # The user must have seen the concrete amount: htmx's preview put it in the form;
            # without JavaScript, this 422 shows it and the next submit confirms it.
            quote = quote_staff_refund(
                order=order,
                charge=charged_charge(order),
                kind=size.kind,
                percentage=size.percentage,
                # A refund that landed since the form was shown is said as such (as the
                # refund itself would), not as a new amount for the same percentage.
                expected=form.snapshot(),
            )
            if values["confirmed_amount_minor"] != str(quote.amount.amount_minor):
                raise _Unconfirmed(
                    f"{percent_text(size.percentage)} comes to {format_money(quote.amount)}. "
                    "Check it and press Refund again to refund that amount."
                )
        return create_staff_refund(
            site=site,
            order=order,
            actor=request.user,
            kind=size.kind,
            amount=size.amount,
            percentage=size.percentage,
            reason=values["reason"],
            note=values["note"],
            expected=form.snapshot(),
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
                method="POST", path=request.path, body=values
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
    return _refund_result(request, order, refund, replayed=answer.replayed)


@require_safe
@site_view(Cap.REFUND)
def order_refund_preview(request: SiteRequest, order_id: str) -> HttpResponse:
    order = order_for(request.site_ctx.site, order_id)
    values = StaffRefundForm(request.GET, currency=order.currency).values
    charge = charged_charge(order)
    refused = rail_refusal(site_id=order.site_id, rail=charge.rail) if charge else None
    context = _preview_context(order, charge, values, rail_refused=refused)
    return render(request, "refunds/_refund_form.html#preview", context)
