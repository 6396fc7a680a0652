"""Activity: the site's signed audit log, newest first, with on-demand chain verification."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import path

from audit import selectors
from audit.models import AuditKind, AuditRecord
from sill.accounts.access import Cap, site_view
from sill.http import SiteRequest
from sill.money import Money, MoneyError
from sill.rails.base import rail_label

PAGE_SIZE = 50


@dataclass(frozen=True)
class ActivityRow:
    record: AuditRecord
    body: dict[str, Any]
    amount: Money | None
    by: str
    # One line saying what an administrative record changed ("" for the other kinds).
    summary: str = ""


def _row(record: AuditRecord) -> ActivityRow:
    try:
        body = json.loads(record.payload).get("body", {})
    except ValueError:  # shown as-is; `audit verify` reports the broken record
        body = {}
    amount = None
    if isinstance(body.get("amount_minor"), int) and isinstance(body.get("currency"), str):
        try:
            amount = Money(body["amount_minor"], body["currency"])
        except MoneyError:
            amount = None
    by = (
        body.get("actor_name")
        or body.get("reviewer")
        or body.get("agent_id")
        or body.get("requested_by")
        or ""
    )
    return ActivityRow(
        record=record,
        body=body,
        amount=amount,
        by=str(by),
        summary=_admin_summary(record.kind, body),
    )


_VERBS = {
    "add": "added",
    "remove": "removed",
    "password_set": "password set by an operator",
    "create": "created",
    "deactivate": "deactivated",
    "reactivate": "reactivated",
    "revoke": "revoked",
    "replace": "replaced",
    "connect": "connected",
    "update": "settings saved",
    "enable": "switched on",
    "disable": "switched off",
}


def _admin_summary(kind: str, body: dict[str, Any]) -> str:
    """Words for member, agent, key and rail changes (never a secret: bodies hold none)."""
    action = str(body.get("action", ""))
    verb = _VERBS.get(action, action.replace("_", " "))
    if kind == AuditKind.MEMBER_CHANGE:
        who = body.get("member", "")
        if action == "role_change":
            before = (body.get("before") or {}).get("role", "?")
            return f"{who}: {before} → {body.get('role')}"
        if action == "add":
            return f"{who}: added as {body.get('role')}"
        return f"{who}: {verb}"
    if kind == AuditKind.AGENT_CHANGE:
        return f"Agent {body.get('agent_id', '')} {verb}"
    if kind == AuditKind.KEY_CHANGE:
        return f"Key {body.get('key_id', '')} of {body.get('agent_id', '')} {verb}"
    if kind == AuditKind.RAIL_CHANGE:
        words = [f"{rail_label(str(body.get('rail', '')))} {verb}"]
        if body.get("mode") and body.get("mode_before") not in (None, body.get("mode")):
            words.append(f"mode {body.get('mode_before')} → {body.get('mode')}")
        elif body.get("mode") and action == "connect":
            words.append(f"{body.get('mode')} mode")
        if body.get("new_key"):
            words.append("new key")
        if body.get("webhook_secrets_changed"):
            count = body.get("webhook_secrets_count")
            words.append(f"webhook secrets changed: {count} secret{'s' if count != 1 else ''}")
        return ", ".join(words)
    return ""


@site_view(Cap.VIEW_ACTIVITY)
def activity(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    kind = request.GET.get("kind", "")
    records = selectors.records_for(site, kind=kind if kind in AuditKind.values else None)
    page = Paginator(records.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
    verification = selectors.chain_verification(site) if request.GET.get("verify") else None
    return render(
        request,
        "audit/activity.html",
        {
            "page": page,
            "rows": [_row(r) for r in page.object_list],
            "kind": kind if kind in AuditKind.values else "",
            "kinds": AuditKind.choices,
            "verification": verification,
        },
    )


app_name = "audit"
urlpatterns = [path("activity/", activity, name="activity")]
