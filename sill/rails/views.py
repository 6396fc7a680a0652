"""Settings → Rails: switch rails on and off, and save the Stripe credentials.

One page, one card per rail; with htmx each form swaps only its card (the view picks the
``card`` partial), without JavaScript every POST redirects back to the page (303) or
re-renders it with the error (422). Nothing here calls a provider: there is deliberately no
"test connection", since rails are only called from Celery tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from sill.accounts.access import Cap, site_view
from sill.accounts.models import Site
from sill.errors import SillError
from sill.http import SiteRequest
from sill.orders.models import Rail
from sill.rails import services
from sill.rails.forms import EnabledForm, StripeForm
from sill.rails.models import RailAccount
from sill.rails.secrets import RailSecretUnreadable

DESCRIPTIONS: dict[str, str] = {
    Rail.MOCK: "Sill's built-in fake provider for demos and tests. No money moves.",
    Rail.STRIPE: "Refunds card payments taken through Stripe, with your secret or restricted key.",
    Rail.SHOPIFY: "Refunds orders paid through Shopify Payments.",
    Rail.WOOCOMMERCE: "Refunds orders of a WooCommerce store.",
    Rail.PAYPAL: "Refunds PayPal captures.",
}


@dataclass
class RailCard:
    """What one rail's card shows; ``form``/``error``/``notice`` only after a POST to it."""

    rail: str
    label: str
    description: str
    available: bool
    account: RailAccount | None = None
    key_hint: str = ""
    key_unreadable: bool = False
    form: StripeForm | None = None
    error: SillError | None = None
    notice: str = ""
    # Stripe: the address to paste into Stripe's webhook endpoint settings.
    webhook_url: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.account and self.account.enabled)


def _card(site: Site, rail: str, account: RailAccount | None) -> RailCard:
    card = RailCard(
        rail=rail,
        label=str(Rail(rail).label),
        description=DESCRIPTIONS.get(rail, ""),
        available=rail in services.CONFIGURABLE_RAILS,
        account=account,
    )
    if account is not None and account.has_secret:
        try:
            # Reading also re-encrypts a key still stored under a fallback SECRET_KEY.
            secret = account.get_secret()
        except RailSecretUnreadable:
            # rail_for() refuses this rail (RailDisabled) for the same reason; say so here.
            card.key_unreadable = True
        else:
            if rail == Rail.STRIPE:
                card.key_hint = services.key_hint(secret)
    if rail == Rail.STRIPE:
        card.webhook_url = reverse("stripe-webhook", args=[site.pk])
        card.form = StripeForm(
            initial={
                "mode": account.mode if account else "test",
                "connected_account": account.connected_account if account else "",
                "api_base": account.api_base if account else "",
            }
        )
    return card


def _cards(site: Site) -> list[RailCard]:
    accounts = {a.rail: a for a in RailAccount.objects.filter(site=site)}
    return [_card(site, rail, accounts.get(rail)) for rail in Rail.values]


def _render(
    request: SiteRequest, card: RailCard | None = None, *, status: int = 200
) -> HttpResponse:
    """The card alone for htmx, else the whole page (with ``card`` replacing its default)."""
    site = request.site_ctx.site
    if card is not None and request.htmx:
        return render(request, "rails/settings.html#card", _context(card), status=status)
    cards = _cards(site)
    if card is not None:
        cards = [card if c.rail == card.rail else c for c in cards]
    return render(request, "rails/settings.html", {"cards": cards, **_context(None)}, status=status)


def _context(card: RailCard | None) -> dict[str, Any]:
    return {
        "card": card,
        "show_api_base": settings.DEBUG,
        "allow_live": settings.SILL_ALLOW_LIVE,
    }


def _done(request: SiteRequest, rail: str, message: str) -> HttpResponse:
    if request.htmx:
        site = request.site_ctx.site
        card = _card(site, rail, RailAccount.objects.filter(site=site, rail=rail).first())
        card.notice = message
        return _render(request, card)
    messages.success(request, message)
    return HttpResponseRedirect(reverse("settings:rails"), status=303)


@require_GET
@site_view(Cap.MANAGE_SETTINGS)
def rails_settings(request: SiteRequest) -> HttpResponse:
    return _render(request)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def rail_set_enabled(request: SiteRequest, rail: str) -> HttpResponse:
    if rail not in Rail.values:
        raise Http404
    site = request.site_ctx.site
    form = EnabledForm(request.POST)
    try:
        if not form.is_valid():
            raise services.RailSettingsError("Choose on or off.", field="enabled")
        enabled = form.cleaned_data["enabled"]
        services.set_rail_enabled(site=site, actor=request.user, rail=rail, enabled=enabled)
    except SillError as error:
        card = _card(site, rail, RailAccount.objects.filter(site=site, rail=rail).first())
        card.error = error
        return _render(request, card, status=422)
    label = Rail(rail).label
    if enabled:
        return _done(request, rail, f"The {label} rail is on: refunds on it can execute.")
    return _done(
        request,
        rail,
        f"The {label} rail is off: refunds of its payments are refused (rail_disabled) "
        "until it is switched on again.",
    )


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def stripe_configure(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    form = StripeForm(request.POST)
    try:
        if not form.is_valid():
            name, errors = next(iter(form.errors.items()))
            raise services.RailSettingsError(str(errors[0]), field=name)
        data = form.cleaned_data
        account = services.configure_stripe(
            site=site,
            actor=request.user,
            secret_key=data["secret_key"],
            connected_account=data["connected_account"],
            mode=data["mode"],
            # The override exists for localstripe; production forms don't even show it.
            api_base=data["api_base"] if settings.DEBUG else None,
            webhook_secrets=data["webhook_secrets"],
        )
    except SillError as error:
        stored = RailAccount.objects.filter(site=site, rail=Rail.STRIPE).first()
        card = _card(site, Rail.STRIPE, stored)
        # Re-show what was typed, except the key (the widget never renders it back).
        card.form = form
        card.error = error
        return _render(request, card, status=422)
    message = "Stripe settings saved."
    if data["secret_key"]:
        message = "Key saved. " + message
    if not account.enabled:
        message += " The rail is still off: switch it on to refund through Stripe."
    return _done(request, Rail.STRIPE, message)


urlpatterns = [
    path("settings/rails/", rails_settings, name="rails"),
    path("settings/rails/stripe/", stripe_configure, name="rails-stripe"),
    path("settings/rails/<str:rail>/enabled/", rail_set_enabled, name="rails-enabled"),
]
