"""Settings → Slack: where held refunds are posted, the app's signing secret (it verifies the
Approve / Reject clicks), and which Slack user is which member. Owners and admins; but what
lets a click speak for a member who decides is the owners' alone: the signing secret (whoever
holds it can sign a click from any linked user) and the links of owners and admins other than
oneself (an admin linking an owner to the admin's own Slack user would approve, from Slack, as
that owner, past "whoever asked cannot approve"). An admin may link themselves and members who
cannot decide.

The signing secret is write-only: the page says whether one is set, never shows it. Every
save is one signed ``settings_change`` record naming what changed (never the secret or the
webhook URL, which is a secret too).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from audit.models import AuditKind
from audit.services import append_record
from refunds.review.slack import seal_signing_secret, seal_webhook_url, webhook_url
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Membership, Role, Site
from sill.http import SiteRequest

SLACK_USER_RE = re.compile(r"\A[UW][A-Z0-9]{2,31}\Z")
WEBHOOK_RE = re.compile(r"\Ahttps://hooks\.slack\.com/services/[A-Za-z0-9/_-]{10,200}\Z")


@require_http_methods(["GET", "POST"])
@site_view(Cap.MANAGE_SETTINGS)
def slack_settings(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    members = list(
        Membership.objects.filter(site=site)
        .select_related("user")
        .order_by("role", "user__username")
    )
    errors: dict[str, str] = {}
    if request.method == "POST":
        errors = _save(request, site, members)
        if not errors:
            messages.success(request, "Slack settings saved.")
            return redirect("refunds:slack-settings")
    base = (settings.SILL_BASE_URL or "").rstrip("/")
    is_owner = request.site_ctx.role == Role.OWNER
    context: dict[str, Any] = {
        "site": site,
        "rows": [
            {
                "member": m,
                "value": request.POST.get(f"slack_{m.pk}", "")
                if request.method == "POST"
                else m.slack_user_id,
                "error": errors.get(f"slack_{m.pk}", ""),
                "decides": m.role in (Role.OWNER, Role.ADMIN),
                "locked": not is_owner
                and m.role in (Role.OWNER, Role.ADMIN)
                and m.user_id != request.user.pk,
            }
            for m in members
        ],
        "errors": errors,
        "secret_set": bool(site.slack_signing_secret),
        "is_owner": is_owner,
        "webhook_set": bool(site.slack_webhook_sealed),
        "request_url": base + reverse("refunds:slack-interactions", args=[site.pk]),
    }
    return render(request, "refunds/slack_settings.html", context, status=422 if errors else 200)


def _save(request: SiteRequest, site: Site, members: list[Membership]) -> dict[str, str]:
    data = request.POST
    errors: dict[str, str] = {}
    webhook = data.get("webhook_url", "").strip()
    clear_webhook = data.get("clear_webhook") == "on"
    if webhook and not WEBHOOK_RE.match(webhook):
        errors["webhook_url"] = "An incoming webhook URL starts https://hooks.slack.com/services/."
    secret = data.get("signing_secret", "").strip()
    if secret and not re.fullmatch(r"[0-9a-f]{32}", secret):
        errors["signing_secret"] = "A Slack signing secret is 32 lowercase hex characters."
    wanted: dict[int, str] = {}
    for member in members:
        value = data.get(f"slack_{member.pk}", "").strip().upper()
        if value and not SLACK_USER_RE.match(value):
            errors[f"slack_{member.pk}"] = "A Slack member ID looks like U04ABCDE12."
        wanted[member.pk] = value
    if request.site_ctx.role != Role.OWNER:
        errors.update(_owners_only(request, members, wanted))
    taken = [v for v in wanted.values() if v]
    if len(taken) != len(set(taken)):
        errors["members"] = "Each Slack user can be linked to one member only."
    if errors:
        return errors
    changed: list[str] = []
    try:
        with transaction.atomic():
            if clear_webhook and site.slack_webhook_sealed:
                site.slack_webhook_sealed = b""
                changed.append("webhook cleared")
            elif webhook and webhook != webhook_url(site):
                site.slack_webhook_sealed = seal_webhook_url(site, webhook)
                changed.append("webhook set")
            if data.get("clear_secret") == "on" and site.slack_signing_secret:
                site.slack_signing_secret = b""
                changed.append("signing secret cleared")
            elif secret:
                site.slack_signing_secret = seal_signing_secret(site, secret)
                changed.append("signing secret set")
            site.save(update_fields=["slack_webhook_sealed", "slack_signing_secret"])
            links = []
            for member in members:
                if member.slack_user_id != wanted[member.pk]:
                    member.slack_user_id = wanted[member.pk]
                    member.save(update_fields=["slack_user_id"])
                    links.append(
                        {
                            "member": member.user.get_username(),
                            "slack_user_id": member.slack_user_id or None,
                        }
                    )
            if changed or links:
                append_record(
                    site=site,
                    kind=AuditKind.SETTINGS_CHANGE,
                    body={
                        "change": "slack",
                        "actor": request.user.get_username(),
                        "changed": changed,
                        "slack_users": links,
                    },
                )
    except IntegrityError:
        return {"members": "That Slack user is already linked to another member."}
    return {}


OWNERS_ONLY_SECRET = "Only an owner can set or remove the signing secret: it signs every click."
OWNERS_ONLY_LINK = (
    "Only an owner can change which Slack user is another owner or admin: a click from that "
    "user decides as them."
)


def _owners_only(
    request: SiteRequest, members: list[Membership], wanted: dict[int, str]
) -> dict[str, str]:
    """What a non-owner's save asks that only an owner may change (module doc)."""
    data = request.POST
    errors: dict[str, str] = {}
    if data.get("signing_secret", "").strip() or data.get("clear_secret") == "on":
        errors["signing_secret"] = OWNERS_ONLY_SECRET
    for member in members:
        decides = member.role in (Role.OWNER, Role.ADMIN)
        other = member.user_id != request.user.pk
        if decides and other and wanted[member.pk] != member.slack_user_id:
            errors[f"slack_{member.pk}"] = OWNERS_ONLY_LINK
    return errors


urlpatterns = [path("settings/slack/", slack_settings, name="slack-settings")]
