"""Staff refunds from the order page go by themselves to the rail that took the payment, end to
end in Chromium, one order per rail: Stripe (localstripe), Shopify (the loopback store), a
WooCommerce order (paid on localstripe, the refund then recorded on the loopback Woo store)
and PayPal (the loopback PayPal). The form never names a rail; each provider sees exactly one
refund. Tasks run eagerly in the live server's thread (tests/conftest.py), on commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stripe
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from refunds.models import Refund
from sill.accounts.models import Site
from sill.money import parse_major
from sill.orders.models import Charge, ChargeStatus, Order
from sill.orders.services import NewLine, create_order
from sill.rails.models import RailAccount
from sill.rails.shopify.sync import sync_orders as sync_shopify
from sill.rails.woocommerce.models import WooOrderLink
from sill.rails.woocommerce.sync import sync_orders as sync_woo
from tests.e2e.conftest import log_in
from tests.localstripe import localstripe_url  # noqa: F401 (fixture)
from tests.rails.paypal_fixtures import paypal  # noqa: F401 (fixture)
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET, WEBHOOK_ID, PayPalStub
from tests.rails.shopify_fixtures import shopify  # noqa: F401 (fixture)
from tests.rails.shopify_stub import SHOP, TOKEN, ShopifyStub
from tests.rails.stripe_events import stripe_account
from tests.rails.woo_fixtures import woo  # noqa: F401 (fixture)
from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, WooStub

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
STAFF = "staff@northwind-coffee.example"
STRIPE_KEY = "sk_test_sill_webhooks_0001"


@pytest.fixture
def demo(page: Page, settings):
    settings.SILL_PAYPAL_TIMEOUT_SECONDS = 5
    settings.SILL_WOOCOMMERCE_TIMEOUT_SECONDS = 5
    settings.SILL_SHOPIFY_TIMEOUT_SECONDS = 5
    page.set_viewport_size({"width": 1440, "height": 900})
    return load_demo().site


@pytest.fixture
def sdk(localstripe_url: str) -> stripe.StripeClient:  # noqa: F811
    return stripe.StripeClient(
        STRIPE_KEY, base_addresses={"api": localstripe_url}, max_network_retries=0
    )


def _stripe_payment(sdk: stripe.StripeClient, amount_minor: int) -> tuple[str, str]:
    """A card payment really made at localstripe: (payment intent id, charge id)."""
    intent = sdk.v1.payment_intents.create(
        params={
            "amount": amount_minor,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "payment_method_types": ["card"],
            "confirm": True,
        }
    )
    latest = intent.latest_charge
    return intent.id, latest if isinstance(latest, str) else latest.id


def _stripe_refunds(sdk: stripe.StripeClient, charge_id: str) -> list[stripe.Refund]:
    return list(sdk.v1.refunds.list(params={"charge": charge_id}).data)


def _make_order(site: Site, *, total: str, rail: str, charge_id: str, payment_id: str) -> Order:
    order = create_order(
        site=site,
        lines=[NewLine(sku="BEAN-1", name="House blend, 1 kg", quantity=1,
                       unit_price=parse_major(total, "USD"))],
        currency="USD",
        buyer_name="Ada Buyer",
        buyer_email="ada@example.com",
    )  # fmt: skip
    Order.objects.filter(pk=order.pk).update(status="PAID")
    Charge.objects.create(
        order=order,
        rail=rail,
        provider_charge_id=charge_id,
        provider_payment_id=payment_id,
        amount_minor=order.total_minor,
        currency="USD",
        status=ChargeStatus.SUCCEEDED,
    )
    return Order.objects.get(pk=order.pk)


def refund_from_the_order_page(
    page: Page, base: str, order: Order, *, amount: str, rail_words: str
) -> None:
    """Log in as staff, refund ``amount`` through the order page's form, see it succeed."""
    log_in(page, base, STAFF)
    page.goto(f"{base}/orders/{order.pk}/")
    panel = page.locator("#refund-panel")
    expect(panel.get_by_role("heading", name="Refund")).to_be_visible()
    # Typing the amount selects "Fixed amount" (clicking the radio first would race the
    # preview's own request).
    panel.get_by_role("textbox", name="Amount in USD").fill(amount)
    expect(panel.get_by_role("radio", name="Fixed amount")).to_be_checked()
    expect(panel.locator("#refund-preview")).to_contain_text(f"You are refunding ${amount}")
    panel.get_by_label("Reason").select_option(label="Requested by customer")
    panel.get_by_role("button", name="Refund", exact=True).click()
    # The confirmation names the rail the money goes back on; confirming moves it.
    confirm = panel.locator(".refund-confirm")
    expect(confirm).to_contain_text(f"on {rail_words}?")
    confirm.get_by_role("button", name=f"Refund ${amount}").click()
    expect(page).to_have_url(f"{base}/orders/{order.pk}/?tab=transactions")
    expect(page.get_by_role("status").first).to_contain_text(f"Refunded ${amount} on {rail_words}")
    heading = page.get_by_role("heading", name=f"Order #{order.number}")
    expect(heading).to_contain_text("Partially refunded")
    expect(page.locator("#transactions tr.tx-refund")).to_have_count(1)


def _after(page: Page, screenshot_dir: Path, name: str) -> None:
    page.screenshot(path=screenshot_dir / f"refund-routing-{name}.png")
    page.get_by_role("tab", name="Overview").click()
    expect(page.get_by_role("tab", name="Overview")).to_have_attribute("aria-selected", "true")
    page.screenshot(path=screenshot_dir / f"refund-routing-{name}-overview.png")


def _only_refund(order: Order, rail: str, amount_minor: int) -> Refund:
    [refund] = Refund.objects.filter(order=order)
    assert (refund.rail, refund.status, refund.amount_minor) == (rail, "succeeded", amount_minor)
    return refund


def test_a_stripe_order_is_refunded_on_stripe(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    localstripe_url,  # noqa: F811
    sdk,
):
    stripe_account(demo, enabled=True, api_base=localstripe_url)
    intent, charge = _stripe_payment(sdk, 6400)
    order = _make_order(demo, total="64.00", rail="stripe", charge_id=charge, payment_id=intent)

    refund_from_the_order_page(page, live_server.url, order, amount="20.00", rail_words="Stripe")
    expect(page.locator("#transactions tr.tx-refund")).to_contain_text("re_")
    _after(page, screenshot_dir, "stripe")

    refund = _only_refund(order, "stripe", 2000)
    [made] = _stripe_refunds(sdk, charge)
    assert (made.id, made.amount) == (refund.provider_refund_id, 2000)


def test_a_shopify_order_is_refunded_on_shopify(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    shopify: ShopifyStub,  # noqa: F811
):
    account = RailAccount(site=demo, rail="shopify", connected_account=SHOP, api_base=shopify.url)
    account.set_secret(TOKEN)
    account.save()
    placed = shopify.add_order(total="64.00")
    sync_shopify(site=demo)
    order = Order.objects.get(site=demo, charges__provider_payment_id=str(placed.id))

    refund_from_the_order_page(page, live_server.url, order, amount="20.00", rail_words="Shopify")
    _after(page, screenshot_dir, "shopify")

    refund = _only_refund(order, "shopify", 2000)
    [made] = placed.refunds
    assert str(made["amount"]) == "20.00" and refund.provider_refund_id == made["id"]


def test_a_woocommerce_order_is_refunded_on_stripe_and_recorded_on_the_store(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    localstripe_url,  # noqa: F811
    sdk,
    woo: WooStub,  # noqa: F811
):
    stripe_account(demo, enabled=True, api_base=localstripe_url)
    store = RailAccount(site=demo, rail="woocommerce", connected_account=woo.url, enabled=True)
    store.set_secret(json.dumps({"consumer_key": CONSUMER_KEY, "consumer_secret": CONSUMER_SECRET}))
    store.save()
    intent, charge = _stripe_payment(sdk, 8900)
    placed = woo.add_order(total="89.00", stripe_intent=intent, stripe_charge=charge)
    sync_woo(site=demo)
    order = WooOrderLink.objects.get(site=demo, woo_order_id=placed.id).order

    refund_from_the_order_page(page, live_server.url, order, amount="25.00", rail_words="Stripe")
    _after(page, screenshot_dir, "woocommerce")
    records = page.locator("#woocommerce-records")
    expect(records).to_contain_text("Recorded on the WooCommerce order")
    records.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "refund-routing-woocommerce-record.png")

    refund = _only_refund(order, "stripe", 2500)
    [made] = _stripe_refunds(sdk, charge)
    assert (made.id, made.amount) == (refund.provider_refund_id, 2500)
    [posted] = woo.refund_posts
    assert (posted["amount"], posted["api_refund"]) == ("25.00", False)
    assert len(placed.refunds) == 1


def test_a_woocommerce_refund_the_store_does_not_take_says_so_on_the_order_page(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    localstripe_url,  # noqa: F811
    sdk,
    woo: WooStub,  # noqa: F811
):
    stripe_account(demo, enabled=True, api_base=localstripe_url)
    store = RailAccount(site=demo, rail="woocommerce", connected_account=woo.url, enabled=True)
    store.set_secret(json.dumps({"consumer_key": CONSUMER_KEY, "consumer_secret": CONSUMER_SECRET}))
    store.save()
    intent, charge = _stripe_payment(sdk, 8900)
    placed = woo.add_order(total="89.00", stripe_intent=intent, stripe_charge=charge)
    sync_woo(site=demo)
    order = WooOrderLink.objects.get(site=demo, woo_order_id=placed.id).order
    woo.read_only = True

    refund_from_the_order_page(page, live_server.url, order, amount="25.00", rail_words="Stripe")
    _after(page, screenshot_dir, "woocommerce-read-only")
    records = page.locator("#woocommerce-records")
    expect(records).to_contain_text("Not recorded on the WooCommerce order: The store's REST API")
    expect(records).to_contain_text("Sill retries every 15 minutes")
    records.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "refund-routing-woocommerce-read-only-record.png")

    _only_refund(order, "stripe", 2500)
    assert len(_stripe_refunds(sdk, charge)) == 1 and placed.refunds == []


def test_a_paypal_order_is_refunded_on_paypal(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    paypal: PayPalStub,  # noqa: F811
):
    account = RailAccount(
        site=demo,
        rail="paypal",
        api_base=paypal.url,
        config={"client_id": CLIENT_ID, "webhook_id": WEBHOOK_ID},
    )
    account.set_secret(CLIENT_SECRET)
    account.save()
    capture = paypal.add_capture(amount="64.00")
    order = _make_order(
        demo, total="64.00", rail="paypal", charge_id=capture.id, payment_id=capture.order_id
    )

    refund_from_the_order_page(page, live_server.url, order, amount="20.00", rail_words="PayPal")
    expect(page.locator("#transactions tr.tx-refund")).to_contain_text(capture.refunds[0]["id"])
    _after(page, screenshot_dir, "paypal")

    refund = _only_refund(order, "paypal", 2000)
    [call] = paypal.refund_calls
    assert call["request_id"] == f"sill-refund-{refund.pk}"
    assert call["body"]["amount"] == {"value": "20.00", "currency_code": "USD"}
    assert [r["id"] for r in capture.refunds] == [refund.provider_refund_id]


def test_an_owner_sees_the_woocommerce_and_paypal_cards(
    page: Page,
    live_server,
    screenshot_dir,
    demo,
    woo: WooStub,  # noqa: F811
):
    store = RailAccount(site=demo, rail="woocommerce", connected_account=woo.url, enabled=False)
    store.set_secret(json.dumps({"consumer_key": CONSUMER_KEY, "consumer_secret": CONSUMER_SECRET}))
    store.save()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/settings/rails/")
    card = page.locator("#rail-woocommerce")
    expect(card).to_contain_text("Stripe not connected")
    card.get_by_role("button", name="Switch on").click()
    expect(card.get_by_role("alert").first).to_contain_text("Connect Stripe first")
    card.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "rails-woocommerce-card.png")
    paypal_card = page.locator("#rail-paypal")
    expect(paypal_card.get_by_label("Client id")).to_be_visible()
    paypal_card.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "rails-paypal-card.png")
    assert not RailAccount.objects.get(pk=store.pk).enabled
