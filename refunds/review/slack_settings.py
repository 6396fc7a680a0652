"""Settings → Slack: where held refunds are posted, the app's signing secret (it verifies the
Approve / Reject clicks) and bot token (Slack confirms with it who a Slack user is before a
link is saved), and which Slack user is which member. Owners and admins; the secret, the
token and the links of owners and admins other than oneself are the owners' alone. Each
member's link state is said beside their box: not linked, waiting for Slack to confirm (its
clicks decide nothing until Slack does), or linked, with the Slack workspace Sill recorded
(or not yet: its clicks decide nothing until the check records it). The rules and the write
are :func:`refunds.review.slack_setup.save_slack_settings`'s, which checks the member's role
itself; the page shows an admin those boxes read-only, and each refusal
beside its field (422).

The signing secret and the bot token are write-only: the page says whether each is set, never
shows it, and neither is the webhook URL (a secret too).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from refunds.review.slack_setup import SlackSettingsRefused, save_slack_settings
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Membership, Role, Site
from sill.http import SiteRequest


@require_http_methods(["GET", "HEAD", "POST"])
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
        "rows": [_row(request, m, errors=errors, is_owner=is_owner) for m in members],
        "errors": errors,
        # Said above the form: the refusals no box on this page stands for (a Slack user
        # linked to two members; an owners-only field an admin does not see); the others are
        # said beside their box.
        "form_errors": [
            message
            for field, message in errors.items()
            if field not in _fields_shown(members, is_owner=is_owner)
        ],
        "secret_set": bool(site.slack_signing_secret),
        "token_set": bool(site.slack_bot_token_sealed),
        # Slack refused the token when the link check last asked (the app uninstalled, the
        # token revoked): said above the form, with what to do.
        "token_refused": site.slack_token_refused if site.slack_bot_token_sealed else "",
        "token_refused_at": site.slack_token_refused_at,
        "is_owner": is_owner,
        "webhook_set": bool(site.slack_webhook_sealed),
        "request_url": base + reverse("refunds:slack-interactions", args=[site.pk]),
    }
    return render(request, "refunds/slack_settings.html", context, status=422 if errors else 200)


def _row(
    request: SiteRequest, member: Membership, *, errors: dict[str, str], is_owner: bool
) -> dict[str, Any]:
    """One member's line of "Who is who": the box, its refusal, whether the viewer may change
    it, and whether Slack has not confirmed the saved link yet (made before Sill asked Slack:
    its clicks decide nothing), said beside the box while it shows that link."""
    field = f"slack_{member.pk}"
    value = request.POST.get(field, "") if request.method == "POST" else member.slack_user_id
    locked = (
        not is_owner
        and member.role in (Role.OWNER, Role.ADMIN)
        and member.user_id != request.user.pk
    )
    # The saved link's state is said only while the box shows that link: beside another
    # Slack user id typed over it (a refused save), it would speak of a link not shown.
    shows_saved = value.strip().upper() == member.slack_user_id
    error = errors.get(field, "")
    described_by = [
        *([f"slack-{member.pk}-error"] if error else []),
        *([f"slack-{member.pk}-state"] if shows_saved else []),
        *(["slack-owners-only"] if locked else []),
    ]
    return {
        "member": member,
        "value": value,
        "error": error,
        "decides": member.role in (Role.OWNER, Role.ADMIN),
        "locked": locked,
        "state": _link_state(member) if shows_saved else "",
        # Why the link check took the link away or will not confirm it, in words (the audit
        # record says it too, where no one looks): "Not linked: …" beside the box.
        "why": member.slack_link_why if shows_saved else "",
        "described_by": " ".join(described_by),
    }


def _link_state(member: Membership) -> str:
    """Where the member's saved Slack link stands, as the page words it: "unlinked";
    "waiting" (Slack has not confirmed it: made before Sill asked Slack, or Slack no longer
    vouches for the user; its clicks decide nothing); "unrecorded" (confirmed before Sill
    recorded its workspace: its clicks decide nothing until the check records it);
    "linked"."""
    if not member.slack_user_id:
        return "unlinked"
    if member.slack_checked_at is None:
        return "waiting"
    return "linked" if member.slack_team_id else "unrecorded"


def _fields_shown(members: list[Membership], *, is_owner: bool) -> set[str]:
    """The form's boxes, by field name, on the page as an owner (``is_owner``) or an admin
    sees it: the secret and the token are an owner's alone."""
    owners = {"signing_secret", "bot_token"} if is_owner else set()
    return {"webhook_url", *owners, *(f"slack_{m.pk}" for m in members)}


def _save(request: SiteRequest, site: Site, members: list[Membership]) -> dict[str, str]:
    """The form's fields to :func:`save_slack_settings`; its refusals' words by field. Every
    member's box is sent (an emptied one unlinks); the service checks the role itself."""
    data = request.POST
    try:
        save_slack_settings(
            site=site,
            actor=request.user,
            webhook_url=data.get("webhook_url", ""),
            clear_webhook=data.get("clear_webhook") == "on",
            signing_secret=data.get("signing_secret", ""),
            clear_secret=data.get("clear_secret") == "on",
            bot_token=data.get("bot_token", ""),
            clear_bot_token=data.get("clear_bot_token") == "on",
            links={m.pk: data.get(f"slack_{m.pk}", "") for m in members},
        )
    except SlackSettingsRefused as refused:
        return refused.field_errors
    return {}


urlpatterns = [path("settings/slack/", slack_settings, name="slack-settings")]
