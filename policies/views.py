"""Rules pages: the rules list with enforced/observe toggles, AUTO-REFUND, the template gallery.

Everyone on the site with ``VIEW_RULES`` (every role) reads them; only ``EDIT_RULES``
(owners, admins) gets the forms, and every POST checks it again here. Each state change is
a POST with CSRF that works without JavaScript (redirect after success, 422 page on an
error); with htmx the view answers the partial the form targets.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from policies import catalog as cat
from policies.forms import AutoRefundForm, ProtectedRefundForm
from policies.rules import ACTION_LABELS, MODE_LABELS
from policies.selectors import active_policy_for, versions_for
from policies.services import (
    MAX_WINDOW_DAYS,
    ApplyResult,
    add_rule,
    apply_catalog_item,
    delete_rule,
    restore_version,
    set_auto_refund,
    set_refund_window,
    set_rule_mode,
)
from policies.simulation import Preview
from policies.vocabulary import FACTS, describe_condition, one_currency
from policies.warnings import policy_warnings
from sill.accounts import two_factor
from sill.accounts.access import Cap, site_view
from sill.errors import NotFound, SillError
from sill.http import SiteRequest
from sill.money import Money

# --- the rules page ---------------------------------------------------------------------------

# A preview's outcomes, in words.
OUTCOME_WORDS = {
    "allow": "Refunded",
    "auto_refund": "Auto-refunded",
    "require_approval": "Held for approval",
    "deny": "Denied",
}


@require_safe
@site_view(Cap.VIEW_RULES)
def rules(request: SiteRequest) -> HttpResponse:
    return render(request, "policies/rules.html", _rules_context(request))


@require_POST
@site_view(Cap.EDIT_RULES)
def rule_mode(request: SiteRequest, rule_id: str) -> HttpResponse:
    mode = request.POST.get("mode", "")
    return _rule_change(
        request,
        lambda site, actor: set_rule_mode(
            site=site, actor=actor, rule_id=rule_id, mode=mode, second_factor=_fresh(request)
        ),
        done=f"Rule {cat.rule_name(rule_id)} is now {MODE_LABELS.get(mode, mode)}.",
    )


@require_POST
@site_view(Cap.EDIT_RULES)
def rule_delete(request: SiteRequest, rule_id: str) -> HttpResponse:
    return _rule_change(
        request,
        lambda site, actor: delete_rule(
            site=site, actor=actor, rule_id=rule_id, second_factor=_fresh(request)
        ),
        done=f"Rule {cat.rule_name(rule_id)} deleted.",
    )


@require_POST
@site_view(Cap.EDIT_RULES)
def auto_refund(request: SiteRequest) -> HttpResponse:
    form = AutoRefundForm(request.POST)
    error: SillError | None = None
    if form.is_valid():
        cap: Money = form.cap_money
        try:
            label = set_auto_refund(
                site=request.site_ctx.site,
                actor=request.user,
                enabled=form.cleaned_data["enabled"],
                cap=cap,
                second_factor=_fresh(request),
            )
        except SillError as exc:
            error = exc
        else:
            state = "on" if form.cleaned_data["enabled"] else "off"
            notice = f"Auto-refund is {state}, cap {cap} (policy {label})."
            if request.htmx:
                context = _rules_context(request, auto_notice=notice, oob=True)
                return render(request, "policies/rules.html#auto-refund", context)
            messages.success(request, notice)
            return redirect("policies:rules")
    context = _rules_context(request, auto_form=form, auto_error=error)
    template = "policies/rules.html#auto-refund" if request.htmx else "policies/rules.html"
    return render(request, template, context, status=422)


@require_POST
@site_view(Cap.EDIT_RULES)
def refund_window(request: SiteRequest) -> HttpResponse:
    """The merchant's own refund window (days from payment), or none."""
    raw = request.POST.get("days", "").strip()
    site = request.site_ctx.site
    try:
        days: int | None = None
        if raw:
            if not (raw.isascii() and raw.isdigit()):
                raise SillError(
                    "Enter a whole number of days, or leave it empty.", code="invalid_field"
                )
            significant = raw.lstrip("0") or "0"
            if len(significant) > len(str(MAX_WINDOW_DAYS)):
                # Out of range however long it is; int() would refuse over 4,300 digits (a 500).
                raise SillError(
                    f"A refund window is 1 to {MAX_WINDOW_DAYS} days, or none.",
                    code="invalid_field",
                )
            days = int(significant)
        set_refund_window(site=site, actor=request.user, days=days, second_factor=_fresh(request))
    except SillError as exc:
        return render(
            request, "policies/rules.html", _rules_context(request, window_error=exc), status=422
        )
    days = site.refund_window_days
    messages.success(
        request,
        f"Refunds are accepted for {days} days after payment."
        if days
        else "No refund window of your own: only the rails' limits apply.",
    )
    return redirect(f"{reverse('policies:rules')}#refund-window")


@require_POST
@site_view(Cap.EDIT_RULES)
def version_restore(request: SiteRequest, number: int) -> HttpResponse:
    return _rule_change(
        request,
        lambda site, actor: restore_version(
            site=site, actor=actor, number=number, second_factor=_fresh(request)
        ),
        done=f"Restored v{number}.",
    )


@require_POST
@site_view(Cap.EDIT_RULES)
def protect_add(request: SiteRequest) -> HttpResponse:
    """The "Protected refunds" form: one rule of the merchant's own (a new policy version)."""
    site = request.site_ctx.site
    form = ProtectedRefundForm(request.POST)
    error: SillError | None = None
    if form.is_valid():
        try:
            label, rule = add_rule(site=site, actor=request.user, rule=form.cleaned_data["rule"])
        except SillError as exc:
            error = exc
        else:
            added = f"Rule {cat.rule_name(rule['id'])} added. Active policy: {label}."
            messages.success(request, added)
            return redirect(f"{reverse('policies:rules')}#rules-section")
    context = _rules_context(request, protect_form=form, protect_error=error)
    return render(request, "policies/rules.html", context, status=422)


def _fresh(request: SiteRequest) -> two_factor.Freshness:
    """A change that widens what may be refunded (a hold or deny rule deleted or only
    observed, auto-refund switched on or raised, the refund window lengthened or removed)
    needs a code from the last few minutes, as an agent's caps do: the service judges it
    under its lock and raises ``TwoFactorRequired``, which ``site_view`` answers with the
    code page. Adding rules and narrowing need only the verified session."""
    return two_factor.freshness(request, request.site_ctx.membership)


def _rule_change(request: SiteRequest, change: Any, *, done: str) -> HttpResponse:
    try:
        label = change(request.site_ctx.site, request.user)
    except NotFound as exc:
        raise Http404(exc.message) from None
    except SillError as exc:
        template = "policies/rules.html#rules-section" if request.htmx else "policies/rules.html"
        return render(request, template, _rules_context(request, error=exc), status=422)
    notice = f"{done} Active policy: {label}."
    if request.htmx:
        context = _rules_context(request, notice=notice, oob=True)
        return render(request, "policies/rules.html#rules-section", context)
    messages.success(request, notice)
    return redirect("policies:rules")


def _rules_context(
    request: SiteRequest,
    *,
    auto_form: AutoRefundForm | None = None,
    notice: str = "",
    error: SillError | None = None,
    auto_notice: str = "",
    auto_error: SillError | None = None,
    oob: bool = False,
    protect_form: ProtectedRefundForm | None = None,
    protect_error: SillError | None = None,
    window_error: SillError | None = None,
) -> dict[str, Any]:
    site = request.site_ctx.site
    active = active_policy_for(site)
    auto = active.auto_refund
    if auto_form is None:
        auto_form = AutoRefundForm(
            initial={
                "enabled": auto.enabled,
                "cap": Money(auto.cap_minor, auto.currency).major_str(),
                "currency": auto.currency,
            }
        )
    return {
        "active": active,
        "rows": _rule_rows(active.rules),
        "can_edit": request.site_ctx.can(Cap.EDIT_RULES),
        "versions": list(versions_for(site)),
        "auto": auto,
        "auto_cap": Money(auto.cap_minor, auto.currency),
        "auto_form": auto_form,
        "notice": notice,
        "error": error,
        "auto_notice": auto_notice,
        "auto_error": auto_error,
        "facts": list(FACTS.values()),
        "warnings": policy_warnings(list(active.rules), active.auto_refund),
        "protect_form": protect_form or ProtectedRefundForm(),
        "protect_error": protect_error,
        "window_error": window_error,
        "window_days": site.refund_window_days,
        # htmx answers also refresh the history out of band: every change adds a version.
        "oob": oob,
    }


def _rule_rows(rules: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": rule["id"],
            "title": cat.rule_title(rule["id"]),
            "conditions": [
                describe_condition(f, c, one_currency(rule["when"]))
                for f, c in rule["when"].items()
            ],
            "action": rule["then"]["action"],
            "action_words": ACTION_LABELS.get(rule["then"]["action"], rule["then"]["action"]),
            "mode": rule.get("mode", "enforced"),
            "mode_words": MODE_LABELS.get(rule.get("mode", "enforced"), ""),
            "from_catalog": rule["id"].startswith("tpl-") or rule["id"] == "r07",
            "json": json.dumps(rule, indent=2),
        }
        for rule in rules
    ]


# --- the template gallery -----------------------------------------------------------------------


@require_safe
@site_view(Cap.VIEW_RULES)
def templates(request: SiteRequest) -> HttpResponse:
    active = active_policy_for(request.site_ctx.site)
    present = {r["id"] for r in active.rules}
    items: list[cat.CatalogItem] = [*cat.PACKS.values(), *cat.TEMPLATES.values()]
    cards = [
        {
            "item": item,
            "applied": [i for i in item.rule_ids if i in present],
            "fully_applied": all(i in present for i in item.rule_ids),
            "params": [_param_field(p, None) for p in item.params],
        }
        for item in items
    ]
    context = {"cards": cards, "can_edit": request.site_ctx.can(Cap.EDIT_RULES)}
    return render(request, "policies/templates.html", context)


@require_safe
@site_view(Cap.EDIT_RULES)
def template_preview(request: SiteRequest, item_id: str) -> HttpResponse:
    """Preview (a dry run): the rules it writes and what they would have done. No write."""
    item = _catalog_item(item_id)
    return _preview_page(request, item, request.GET)


@require_POST
@site_view(Cap.EDIT_RULES)
def template_apply(request: SiteRequest, item_id: str) -> HttpResponse:
    item = _catalog_item(item_id)
    params = _params_from(item, request.POST)
    try:
        result = apply_catalog_item(
            site=request.site_ctx.site,
            actor=request.user,
            item=item,
            params=params,
            mode=request.POST.get("mode") or "enforced",
        )
    except SillError as exc:
        return _preview_page(request, item, request.POST, error=exc, status=422)
    if result.status == "already_applied":
        names = cat.rule_names(result.already)
        messages.info(request, f"Already applied: {names} {_are(result.already)} there.")
    else:
        # A template's one rule bears its title; a pack names its own, then its rules'.
        written = cat.rule_names(result.rules)
        what = f"{item.title}: {written}" if item.kind == "pack" else written
        mode = MODE_LABELS.get(result.mode, result.mode)
        messages.success(request, f"Applied {what}, {mode}. Active policy: {result.version_label}.")
    url = reverse("policies:rules")
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def _preview_page(
    request: SiteRequest,
    item: cat.CatalogItem,
    data: QueryDict,
    *,
    error: SillError | None = None,
    status: int = 200,
) -> HttpResponse:
    params = _params_from(item, data)
    mode = data.get("mode") or "enforced"
    result: ApplyResult | None = None
    if error is None:
        try:
            result = apply_catalog_item(
                site=request.site_ctx.site,
                actor=request.user,
                item=item,
                params=params,
                mode=mode,
                dry_run=True,
            )
        except SillError as exc:
            error, status = exc, 422
    site = request.site_ctx.site
    active = active_policy_for(site)
    preview = result.preview if result else None
    context = {
        "item": item,
        "mode": mode,
        "warnings": (
            policy_warnings([*active.rules, *result.rules], active.auto_refund) if result else []
        ),
        "params": [_param_field(p, params.get(p.name)) for p in item.params],
        "result": result,
        "preview": preview,
        "refund_section": _replay_section(result, preview, **_REFUNDS),
        "credit_section": _replay_section(result, preview.credits if preview else None, **_CREDITS),
        "written": _rule_rows(result.rules) if result else [],
        "already": _rule_rows(result.already) if result else [],
        "written_json": json.dumps(result.rules, indent=2) if result else "",
        "error": error,
    }
    template = "policies/template_preview.html"
    if request.htmx and request.htmx.target == "preview":
        template += "#preview"
    return render(request, template, context, status=status)


# The words and element ids of the preview's two replays (template_preview.html, "replay").
_REFUNDS = {"id": "preview", "plural": "refund requests", "title": "Refunds", "one": "Refund"}
_CREDITS = {
    "id": "preview-credit",
    "plural": "customer credits",
    "title": "Credits",
    "one": "Credit",
}


def _replay_section(
    result: ApplyResult | None, preview: Preview | None, **words: str
) -> dict[str, Any]:
    """What the page shows of one replay (refunds, or customer credits): each rule's impact
    (the template's own rules marked new), the requests decided differently and their money."""
    if result is None or preview is None:
        return {**words, "rows": [], "affected": [], "affected_money": []}
    new = {r["id"] for r in result.rules}
    return {
        **words,
        # AUTO-REFUND lifts refunds' holds only: a credit is decided by its rules alone.
        "auto_refund": preview.noun == "refund",
        "rows": [
            {
                "impact": impact,
                "title": cat.rule_title(impact.id),
                "action_words": ACTION_LABELS.get(impact.action, impact.action),
                "new": impact.id in new,
                "amounts": [Money(m, c) for c, m in sorted(impact.amounts.items())],
            }
            for impact in preview.rules
        ],
        "affected": [
            {
                "change": change,
                "amount": Money(change.amount_minor, change.currency),
                "active": OUTCOME_WORDS.get(change.active, change.active),
                "draft": OUTCOME_WORDS.get(change.draft, change.draft),
            }
            for change in preview.changes
        ],
        "affected_money": [Money(m, c) for c, m in sorted(preview.changed_amounts.items())],
    }


def _catalog_item(item_id: str) -> cat.CatalogItem:
    item = cat.item_by_id(item_id)
    if item is None:
        raise Http404("No such template or pack.")
    return item


def _params_from(item: cat.CatalogItem, data: QueryDict) -> dict[str, str]:
    # Unknown names are simply not read: a form only ever posts the item's own parameters.
    values = {p.name: data.get(p.name, "") for p in item.params}
    return {name: value for name, value in values.items() if value != ""}


def _param_field(param: cat.Param, value: Any) -> dict[str, Any]:
    return {
        "param": param,
        "value": value if value not in (None, "") else param.display(param.default),
    }


def _are(rules: list[dict[str, Any]]) -> str:
    return "is" if len(rules) == 1 else "are"
