"""Settings → Rails: switch rails on and off, and save each rail's credentials.

One page, one card per rail; with htmx each form swaps only its card (the view picks the
``card`` partial), without JavaScript every POST redirects back to the page (303) or
re-renders it with the error (422). Saving Stripe credentials calls no provider (the first
refund proves the key); saving a Shopify token, WooCommerce keys or PayPal credentials makes
one read that moves nothing (scopes, one order, a token), so refused credentials save nothing.
"Test connection" (POST, owners and admins) makes the rail's cheap read with the stored
credentials and shows the answer on the card (sill/rails/connection.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.views.decorators.http import require_POST, require_safe

from sill.accounts import two_factor
from sill.accounts.access import Cap, site_view
from sill.accounts.models import Site
from sill.errors import SillError
from sill.http import SiteRequest
from sill.orders.models import Rail
from sill.rails import connection, services
from sill.rails.forms import EnabledForm, PayPalForm, ShopifyForm, StripeForm, WooCommerceForm
from sill.rails.left_behind import (
    ACCOUNT_RAILS,
    PAYMENT_ACCOUNT_RAILS,
    LeftBehind,
    left_behind,
    payment_left_behind,
)
from sill.rails.models import RailAccount
from sill.rails.paypal import connect as paypal_connect
from sill.rails.secrets import RailSecretUnreadable
from sill.rails.shopify import connect as shopify_connect
from sill.rails.woocommerce import connect as woo_connect

DESCRIPTIONS: dict[str, str] = {
    Rail.MOCK: "Sill's built-in fake provider for demos and tests. No money moves.",
    Rail.STRIPE: "Refunds card payments taken through Stripe, with your secret or restricted key.",
    Rail.SHOPIFY: (
        "Refunds orders paid on your Shopify store, on the payment that took them: test orders "
        "on a development store only, unless Sill runs with SILL_ALLOW_LIVE=1."
    ),
    Rail.WOOCOMMERCE: (
        "Brings in the orders of a WooCommerce store paid through its Stripe gateway; their "
        "refunds run on this site's Stripe rail and are then recorded on the WooCommerce order."
    ),
    Rail.PAYPAL: (
        "Refunds orders paid by PayPal, on their capture: sandbox only, unless Sill runs with "
        "SILL_ALLOW_LIVE=1. PayPal refunds a capture for 180 days."
    ),
}


@dataclass
class StripeUnderneath:
    """The WooCommerce card's words about the Stripe account its payments run on."""

    connected: bool
    enabled: bool = False
    key_hint: str = ""
    mode: str = ""
    connected_account: str = ""


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
    form: StripeForm | ShopifyForm | WooCommerceForm | PayPalForm | None = None
    error: SillError | None = None
    notice: str = ""
    # Stripe: the address to paste into Stripe's webhook endpoint settings.
    webhook_url: str = ""
    # Shopify: the token's scopes as last checked, and the required ones it lacks (with why).
    scopes: list[str] = field(default_factory=list)
    missing_scopes: list[tuple[str, str]] = field(default_factory=list)
    # WooCommerce: the Stripe account the store's payments run on.
    stripe: StripeUnderneath | None = None
    # PayPal: the saved webhook id (deliveries are refused without it).
    webhook_id: str = ""
    # "Test connection": offered when there is something to test; its answer after a POST.
    testable: bool = False
    check: connection.ConnectionCheck | None = None
    # Shopify and WooCommerce: orders of earlier shops or stores still refundable, which Sill
    # refuses while another one is connected (sill.rails.left_behind).
    left_behind: list[LeftBehind] = field(default_factory=list)

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
        testable=connection.can_test(account),
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
            elif rail == Rail.SHOPIFY:
                card.key_hint = shopify_connect.token_hint(secret)
            elif rail == Rail.WOOCOMMERCE:
                card.key_hint = woo_connect.key_hint(_woo_key(secret))
            elif rail == Rail.PAYPAL:
                card.key_hint = paypal_connect.secret_hint(secret)
    if rail == Rail.STRIPE:
        card.webhook_url = reverse("stripe-webhook", args=[site.pk])
        card.form = StripeForm(
            initial={
                "mode": account.mode if account else "test",
                "connected_account": account.connected_account if account else "",
                "api_base": account.api_base if account else "",
            }
        )
    if rail == Rail.SHOPIFY:
        _shopify_card(site, card, account)
    if rail == Rail.WOOCOMMERCE:
        card.webhook_url = reverse("woocommerce-webhook", args=[site.pk])
        card.form = WooCommerceForm(
            initial={"store_url": account.connected_account if account else ""}
        )
    if rail == Rail.PAYPAL:
        _paypal_card(site, card, account)
    if rail in ACCOUNT_RAILS and account is not None:
        card.left_behind = left_behind(
            site_id=site.pk, rail=rail, connected=account.connected_account
        )
    if rail in PAYMENT_ACCOUNT_RAILS and account is not None:
        card.left_behind = payment_left_behind(
            site_id=site.pk, rail=rail, connected=account.payment_account
        )
    return card


def _woo_key(secret: str) -> str:
    try:
        return str(json.loads(secret).get("consumer_key") or "")
    except (ValueError, AttributeError):
        return ""


def _paypal_card(site: Site, card: RailCard, account: RailAccount | None) -> None:
    config = (account.config or {}) if account else {}
    card.webhook_url = reverse("paypal-webhook", args=[site.pk])
    card.webhook_id = str(config.get("webhook_id") or "")
    card.form = PayPalForm(
        initial={
            "client_id": str(config.get("client_id") or ""),
            "mode": account.mode if account else "test",
            "webhook_id": card.webhook_id,
            "api_base": account.api_base if account else "",
        }
    )


def _stripe_underneath(stripe: RailAccount | None) -> StripeUnderneath:
    if stripe is None or not stripe.has_secret:
        return StripeUnderneath(connected=False)
    try:
        hint = services.key_hint(stripe.get_secret())
    except RailSecretUnreadable:
        hint = ""
    return StripeUnderneath(
        connected=True,
        enabled=stripe.enabled,
        key_hint=hint,
        mode=str(stripe.get_mode_display()),
        connected_account=stripe.connected_account,
    )


def _shopify_card(site: Site, card: RailCard, account: RailAccount | None) -> None:
    card.webhook_url = reverse("shopify-webhook", args=[site.pk])
    card.form = ShopifyForm(
        initial={
            "shop_domain": account.connected_account if account else "",
            "api_base": account.api_base if account else "",
        }
    )
    if account is not None and isinstance((account.config or {}).get("scopes"), list):
        card.scopes = [str(s) for s in account.config["scopes"]]
        card.missing_scopes = [
            (s, shopify_connect.WHY_SCOPE[s]) for s in shopify_connect.missing_scopes(card.scopes)
        ]


def _cards(site: Site) -> list[RailCard]:
    accounts = {a.rail: a for a in RailAccount.objects.filter(site=site)}
    cards = [_card(site, rail, accounts.get(rail)) for rail in Rail.values]
    for card in cards:
        if card.rail == Rail.WOOCOMMERCE:
            card.stripe = _stripe_underneath(accounts.get(Rail.STRIPE))
    return cards


def _render(
    request: SiteRequest, card: RailCard | None = None, *, status: int = 200
) -> HttpResponse:
    """The card alone for htmx, else the whole page (with ``card`` replacing its default)."""
    site = request.site_ctx.site
    if card is not None and request.htmx:
        if card.rail == Rail.WOOCOMMERCE and card.stripe is None:
            stripe = RailAccount.objects.filter(site=site, rail=Rail.STRIPE).first()
            card.stripe = _stripe_underneath(stripe)
        return render(request, "rails/settings.html#card", _context(card), status=status)
    cards = _cards(site)
    if card is not None:
        for i, default in enumerate(cards):
            if default.rail == card.rail:
                card.stripe = card.stripe or default.stripe
                cards[i] = card
    unavailable = any(not c.available for c in cards)
    context = {"cards": cards, "unavailable": unavailable, **_context(None)}
    return render(request, "rails/settings.html", context, status=status)


def _context(card: RailCard | None) -> dict[str, Any]:
    return {
        "card": card,
        "show_api_base": settings.DEBUG,
        "allow_live": settings.SILL_ALLOW_LIVE,
        # Webhook addresses as providers must call them: the configured base URL, never the
        # Host header of this request.
        "base_url": (settings.SILL_BASE_URL or "").rstrip("/"),
    }


def _done(request: SiteRequest, rail: str, message: str) -> HttpResponse:
    if request.htmx:
        site = request.site_ctx.site
        card = _card(site, rail, RailAccount.objects.filter(site=site, rail=rail).first())
        card.notice = message
        return _render(request, card)
    messages.success(request, message)
    return HttpResponseRedirect(reverse("settings:rails"), status=303)


def _second_factor(request: SiteRequest) -> two_factor.Freshness:
    """What the rail services are told of this session's code: a new key or webhook signing
    secret, a save in live mode and switching a live account on need one entered in the last
    few minutes. The service judges which (two_factor.TwoFactorRequired; site_view answers
    the 403 page), so no caller can skip it."""
    return two_factor.freshness(request, request.site_ctx.membership)


@require_safe
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
        # Switching a live account on lets real money move, as saving it in live mode does:
        # the service asks for the same fresh code, judged on the row it locks.
        services.set_rail_enabled(
            site=site,
            actor=request.user,
            rail=rail,
            enabled=enabled,
            second_factor=_second_factor(request),
        )
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
        f"The {label} rail is off: refunds of its payments are refused (listed as “The rail "
        "is off or not connected”) until it is switched on again.",
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
            second_factor=_second_factor(request),
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


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def shopify_configure(request: SiteRequest) -> HttpResponse:
    site = request.site_ctx.site
    form = ShopifyForm(request.POST)
    try:
        if not form.is_valid():
            name, errors = next(iter(form.errors.items()))
            raise services.RailSettingsError(str(errors[0]), field=name)
        data = form.cleaned_data
        account, missing = shopify_connect.configure_shopify(
            site=site,
            actor=request.user,
            shop_domain=data["shop_domain"],
            access_token=data["access_token"],
            webhook_secrets=data["webhook_secrets"],
            api_base=data["api_base"] if settings.DEBUG else None,
            second_factor=_second_factor(request),
        )
    except SillError as error:
        stored = RailAccount.objects.filter(site=site, rail=Rail.SHOPIFY).first()
        card = _card(site, Rail.SHOPIFY, stored)
        card.form = form
        card.error = error
        return _render(request, card, status=422)
    message = f"Store {account.connected_account} saved."
    message += _left_behind_words(site, Rail.SHOPIFY, account)
    if missing:
        message += " The token lacks " + ", ".join(missing) + ": see below."
    if not account.enabled:
        message += " The rail is still off: switch it on to refund through Shopify."
    return _done(request, Rail.SHOPIFY, message)


def _left_behind_words(site: Site, rail: str, account: RailAccount) -> str:
    """After a save: the orders of earlier accounts Sill now refuses to refund, in words."""
    left = left_behind(site_id=site.pk, rail=rail, connected=account.connected_account)
    return "".join(" " + each.sentence for each in left)


def _refused(
    request: SiteRequest, rail: str, form: WooCommerceForm | PayPalForm, error: SillError
) -> HttpResponse:
    """422: the card again with the error, what was typed (never a secret: the widgets don't
    render them back) and the stored account untouched."""
    site = request.site_ctx.site
    card = _card(site, rail, RailAccount.objects.filter(site=site, rail=rail).first())
    card.form = form
    card.error = error
    return _render(request, card, status=422)


def _first_error(form: WooCommerceForm | PayPalForm) -> services.RailSettingsError:
    name, errors = next(iter(form.errors.items()))
    return services.RailSettingsError(str(errors[0]), field=name)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def woocommerce_configure(request: SiteRequest) -> HttpResponse:
    form = WooCommerceForm(request.POST)
    try:
        if not form.is_valid():
            raise _first_error(form)
        data = form.cleaned_data
        account = woo_connect.configure_woocommerce(
            site=request.site_ctx.site,
            actor=request.user,
            store_url=data["store_url"],
            consumer_key=data["consumer_key"],
            consumer_secret=data["consumer_secret"],
            webhook_secret=data["webhook_secret"],
            second_factor=_second_factor(request),
        )
    except SillError as error:
        return _refused(request, Rail.WOOCOMMERCE, form, error)
    message = f"Store {account.connected_account} saved: the keys can read its orders."
    message += _left_behind_words(request.site_ctx.site, Rail.WOOCOMMERCE, account)
    if not account.enabled:
        message += " It is still off: switch it on once Stripe is connected."
    return _done(request, Rail.WOOCOMMERCE, message)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def paypal_configure(request: SiteRequest) -> HttpResponse:
    form = PayPalForm(request.POST)
    try:
        if not form.is_valid():
            raise _first_error(form)
        data = form.cleaned_data
        account = paypal_connect.configure_paypal(
            site=request.site_ctx.site,
            actor=request.user,
            client_id=data["client_id"],
            client_secret=data["client_secret"],
            mode=data["mode"],
            webhook_id=data["webhook_id"],
            api_base=data["api_base"] if settings.DEBUG else None,
            second_factor=_second_factor(request),
        )
    except SillError as error:
        return _refused(request, Rail.PAYPAL, form, error)
    mode = "sandbox" if account.mode == "test" else "live"
    message = f"PayPal accepted the credentials ({mode}). PayPal settings saved."
    if not (account.config or {}).get("webhook_id"):
        message += " Without a webhook id, PayPal's webhooks are refused."
    if not account.enabled:
        message += " The rail is still off: switch it on to refund through PayPal."
    return _done(request, Rail.PAYPAL, message)


@require_POST
@site_view(Cap.MANAGE_SETTINGS)
def rail_test_connection(request: SiteRequest, rail: str) -> HttpResponse:
    """Check the stored credentials now; the card shows the answer (nothing is saved)."""
    if rail not in Rail.values:
        raise Http404
    site = request.site_ctx.site
    account = RailAccount.objects.filter(site=site, rail=rail).first()
    card = _card(site, rail, account)
    if account is None or not card.testable:
        card.check = connection.ConnectionCheck(
            rail=rail,
            ok=False,
            message=f"There is nothing to test yet: save {card.label} credentials first.",
            code="not_configured",
        )
        return _render(request, card, status=422)
    card.check = connection.test_connection(account)
    return _render(request, card)


urlpatterns = [
    path("settings/rails/", rails_settings, name="rails"),
    path("settings/rails/paypal/", paypal_configure, name="rails-paypal"),
    path("settings/rails/woocommerce/", woocommerce_configure, name="rails-woocommerce"),
    path("settings/rails/shopify/", shopify_configure, name="rails-shopify"),
    path("settings/rails/stripe/", stripe_configure, name="rails-stripe"),
    path("settings/rails/<str:rail>/enabled/", rail_set_enabled, name="rails-enabled"),
    path("settings/rails/<str:rail>/test/", rail_test_connection, name="rails-test"),
]
