"""Settings → Agents: agents, their ed25519 keys, and bearer tokens.

Every key added or revoked writes a signed ``key_change`` audit record (in the services).
A bearer token is shown once, on the response to the POST that issued it (``no-store``);
only its SHA-256 is kept. Each agent's tokens are listed by prefix, with Revoke
(:func:`services.revoke_agent_token`): a leaked one is stopped without switching the agent
off. Adding a key and issuing a token each need a code entered in the last few minutes where
the site requires two factors: both make a credential that outlives the session, and a key
signs mandates that move money. So does whatever widens what the agent's existing keys may do
with money: reactivating it, switching its refunds on, raising or lifting a cap.
Deactivating, switching off, lowering caps and revoking a key or token take a verified session
alone: they are the brake, and must work in one click. The services judge it (each that
widens takes the view's ``two_factor.freshness`` as a required ``second_factor``);
``site_view`` answers the 403.

The add-key form carries that code itself when the session's is stale: one submit verifies it
(a wrong one counted as the verify page counts it) and adds the key, and a wrong or missing
code gives the form back as typed, where the refusal page made the merchant type it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.db.models import Count, Prefetch, Q
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe
from django_htmx.http import HttpResponseClientRedirect

from sill.accounts import services, two_factor
from sill.accounts.access import Cap, site_view
from sill.accounts.agent_forms import AddKeyForm
from sill.accounts.models import Agent, AgentKey, AgentToken, Site
from sill.accounts.views_two_factor import WRONG_CODE, attempt_code
from sill.error_pages import wants_json
from sill.errors import SillError
from sill.http import SiteRequest
from sill.money import Money, MoneyError, parse_major


@dataclass(frozen=True)
class KeyRow:
    key: AgentKey
    public_key: str
    status: str
    badge: str


def _key_row(key: AgentKey, now: datetime) -> KeyRow:
    if key.revoked_at is not None:
        status, badge = "Revoked", "bad"
    elif key.valid_until is not None and key.valid_until <= now:
        status, badge = "Expired", "muted"
    elif key.valid_from > now:
        status, badge = "Not yet valid", "info"
    else:
        status, badge = "Valid", "ok"
    return KeyRow(key, services.b64url_encode(bytes(key.public_key)), status, badge)


def _agents(site: Site) -> list[dict[str, Any]]:
    now = timezone.now()
    agents = (
        Agent.objects.filter(site=site)
        # Not revoked; a deactivated agent's are refused until it is reactivated (sill.bearer).
        .annotate(unrevoked_tokens=Count("tokens", filter=Q(tokens__revoked_at__isnull=True)))
        .prefetch_related(
            Prefetch("keys", queryset=AgentKey.objects.order_by("valid_from", "pk")),
            Prefetch("tokens", queryset=AgentToken.objects.order_by("-created_at", "-pk")),
        )
    )
    return [
        {
            "agent": a,
            "keys": [_key_row(k, now) for k in a.keys.all()],
            # Newest first, revoked ones too: the prefix is all anyone can tell them by.
            "tokens": list(a.tokens.all()),
            "cap": Money(a.refund_cap_minor or 0, site.default_currency),
            "daily_cap": Money(a.daily_refund_cap_minor or 0, site.default_currency),
        }
        for a in agents
    ]


def _blank_form() -> AddKeyForm:
    now = timezone.now().astimezone(timezone.get_current_timezone())
    return AddKeyForm(initial={"valid_from": now.strftime("%Y-%m-%dT%H:%M")})


def _page(
    request: SiteRequest,
    *,
    form: AddKeyForm | None = None,
    error: SillError | None = None,
    code_error: str = "",
    status: int = 200,
) -> HttpResponse:
    site = request.site_ctx.site
    context = {
        "form": form or _blank_form(),
        "error": error,
        "code_error": code_error,
        "ask_code": _code_is_stale(request),
    }
    if request.htmx and status == 422:
        return render(request, "accounts/agents.html#add-key", context, status=status)
    return render(
        request, "accounts/agents.html", {**context, "agents": _agents(site)}, status=status
    )


def _back(request: SiteRequest, message: str) -> HttpResponse:
    messages.success(request, message)
    url = reverse("settings:agents")
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url, status=303)


def _agent_for(request: SiteRequest, agent_pk: int) -> Agent:
    # Scoped to the current site: another site's agent is a 404, never a 403.
    return get_object_or_404(Agent, pk=agent_pk, site=request.site_ctx.site)


def _code_is_stale(request: SiteRequest) -> bool:
    """A code entered in this session, but too long ago for a new key: the form asks for one.

    Not for a missing authenticator or an unverified session: ``site_view`` refuses every
    change of those before the view runs, so a code field here could not help."""
    refused = two_factor.fresh_refusal(request, request.site_ctx.membership)
    return refused is not None and refused.reason == two_factor.TwoFactorRequired.NOT_FRESH


def _fresh_code_from_form(request: SiteRequest) -> tuple[str, HttpResponse | None]:
    """Verify the form's code when the session's is stale: ("", None) when the key may be
    added, (the words under the code field, None) when not, or (…, the lockout page)."""
    if not _code_is_stale(request):
        return "", None
    code = request.POST.get("code", "").strip()
    if not code:
        # The page was loaded while the code was fresh, so it had no code field: not a wrong
        # code, and not counted as one.
        return two_factor.TwoFactorRequired(two_factor.TwoFactorRequired.NOT_FRESH).message, None
    device, lockout = attempt_code(request, request.site_ctx.user, code)
    if lockout is not None:
        return WRONG_CODE, lockout
    if device is None:
        return WRONG_CODE, None
    two_factor.mark_verified(request, device)
    return "", None


@require_safe
@site_view(Cap.MANAGE_SETTINGS)
def agents_page(request: SiteRequest) -> HttpResponse:
    return _page(request)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_key_add(request: SiteRequest) -> HttpResponse:
    # Whoever holds the key's private half signs refund mandates: as sensitive as a rail's new
    # key, so the same fresh code. The page's form may carry it.
    form = AddKeyForm(request.POST)
    if not wants_json(request):
        code_error, lockout = _fresh_code_from_form(request)
        if lockout is not None:
            return lockout
        if code_error:
            return _page(request, form=form, code_error=code_error, status=422)
    try:
        if not form.is_valid():
            name, errors = next(iter(form.errors.items()))
            label = form.fields[name].label if name in form.fields else name
            raise SillError(f"{label}: {errors[0]}", code="invalid_field", field=name)
        data = form.cleaned_data
        key = services.register_agent_key(
            site=request.site_ctx.site,
            actor=request.user,
            agent_id=data["agent_id"],
            key_id=data["key_id"],
            public_key_b64url=data["public_key"],
            valid_from=data["valid_from"],
            valid_until=data["valid_until"],
            # Still the gate: a JSON client is refused in JSON (site_view answers the 403).
            second_factor=two_factor.freshness(request, request.site_ctx.membership),
        )
    except SillError as error:
        return _page(request, form=form, error=error, status=422)
    return _back(request, f"Added key {key.key_id} to {key.agent.agent_id}.")


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_key_revoke(request: SiteRequest, key_pk: int) -> HttpResponse:
    key = get_object_or_404(
        AgentKey.objects.select_related("agent"),
        pk=key_pk,
        agent__site=request.site_ctx.site,
    )
    services.revoke_agent_key(key=key, actor=request.user)
    return _back(
        request,
        f"Revoked key {key.key_id} of {key.agent.agent_id}: mandates signed with it are refused, "
        "and refunds approved under it that are not sent yet will not be sent.",
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_deactivate(request: SiteRequest, agent_pk: int) -> HttpResponse:
    agent = services.set_agent_active(
        agent=_agent_for(request, agent_pk),
        actor=request.user,
        active=False,
        # The brake: never refused for a stale code, but the service is told who acts.
        second_factor=two_factor.freshness(request, request.site_ctx.membership),
    )
    return _back(
        request,
        f"Deactivated {agent.agent_id}: its mandates and tokens are refused until reactivated, "
        "and its approved refunds not sent yet will not be sent.",
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_reactivate(request: SiteRequest, agent_pk: int) -> HttpResponse:
    agent = _agent_for(request, agent_pk)
    # Its keys sign mandates again: a stolen session must not undo the owner's brake (the
    # service asks for the fresh code; site_view answers its 403 page).
    agent = services.set_agent_active(
        agent=agent,
        actor=request.user,
        active=True,
        second_factor=two_factor.freshness(request, request.site_ctx.membership),
    )
    return _back(request, f"Reactivated {agent.agent_id}.")


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_refunds(request: SiteRequest, agent_pk: int) -> HttpResponse:
    """The agent's refund method (on/off) and its caps per refund and per day."""
    agent = _agent_for(request, agent_pk)
    currency = request.site_ctx.site.default_currency
    try:
        caps = [_cap(request.POST.get(name, ""), currency) for name in ("cap", "daily_cap")]
        services.set_agent_refunds(
            agent=agent,
            actor=request.user,
            enabled=request.POST.get("refund_enabled") == "on",
            cap_minor=caps[0],
            daily_cap_minor=caps[1],
            # Switching on or raising a cap needs a fresh code, lowering or switching off
            # does not: which one this is, the service tells from the row it locks.
            second_factor=two_factor.freshness(request, request.site_ctx.membership),
        )
    except (SillError, MoneyError) as exc:
        messages.error(request, f"Nothing changed for {agent.agent_id}: {exc}")
        return HttpResponseRedirect(reverse("settings:agents"), status=303)
    state = (
        "may ask for refunds"
        if request.POST.get("refund_enabled") == "on"
        else "may not ask for refunds"
    )
    return _back(request, f"{agent.agent_id} {state}.")


def _cap(text: str, currency: str) -> int | None:
    text = text.strip().replace(",", "")
    if not text:
        return None
    money = parse_major(text, currency)
    if money.amount_minor < 0:
        raise SillError("A cap cannot be negative.", code="invalid_field")
    return money.amount_minor


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_token_issue(request: SiteRequest, agent_pk: int) -> HttpResponse:
    agent = _agent_for(request, agent_pk)
    # A bearer token reads the agent's refunds for as long as it lives, whoever holds it: the
    # service asks for a fresh code (site_view answers its 403 page), and refuses a
    # deactivated agent, as `manage.py agents token` does.
    try:
        token = services.issue_agent_token(
            agent=agent,
            actor=request.user,
            second_factor=two_factor.freshness(request, request.site_ctx.membership),
        )
    except SillError as exc:
        if exc.code != "agent_deactivated":
            raise
        messages.error(request, exc.message)
        return HttpResponseRedirect(reverse("settings:agents"), status=303)
    response = render(request, "accounts/agents_token.html", {"agent": agent, "token": token})
    # The token exists nowhere else: keep it out of every cache (back button, proxies).
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def agent_token_revoke(request: SiteRequest, token_pk: int) -> HttpResponse:
    # Scoped to the current site: another site's token is a 404. No fresh code: a brake.
    token = get_object_or_404(
        AgentToken.objects.select_related("agent"), pk=token_pk, agent__site=request.site_ctx.site
    )
    already = token.revoked_at is not None
    services.revoke_agent_token(token=token, actor=request.user)
    whose = f"API token {token.prefix}… of {token.agent.agent_id}"
    if already:
        return _back(request, f"The {whose} was already revoked.")
    return _back(request, f"The {whose} was revoked: whatever uses it is refused from now on.")


urlpatterns = [
    path("settings/agents/", agents_page, name="agents"),
    path("settings/agents/keys/add/", agent_key_add, name="agent-key-add"),
    path("settings/agents/keys/<int:key_pk>/revoke/", agent_key_revoke, name="agent-key-revoke"),
    path("settings/agents/<int:agent_pk>/deactivate/", agent_deactivate, name="agent-deactivate"),
    path("settings/agents/<int:agent_pk>/reactivate/", agent_reactivate, name="agent-reactivate"),
    path("settings/agents/<int:agent_pk>/token/", agent_token_issue, name="agent-token"),
    path(
        "settings/agents/tokens/<int:token_pk>/revoke/",
        agent_token_revoke,
        name="agent-token-revoke",
    ),
    path("settings/agents/<int:agent_pk>/refunds/", agent_refunds, name="agent-refunds"),
]
