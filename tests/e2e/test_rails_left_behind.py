"""Settings → Rails in Chromium after the site switched Shopify shops: the card says which of
the earlier shop's orders Sill now refuses to refund, on a laptop and a phone, axe-clean. The
shops are loopback stubs (tests/rails/shopify_stub.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from refunds.demo import load_demo
from sill.rails.models import RailAccount
from sill.rails.shopify.sync import sync_orders
from tests.e2e.accessibility import horizontal_overflow, run_axe
from tests.e2e.conftest import log_in
from tests.rails.shopify_fixtures import shopify  # noqa: F401 (fixture)
from tests.rails.shopify_stub import SHOP, TOKEN, ShopifyStub

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_shopify_card_lists_the_earlier_shops_orders(
    browser: Browser,
    live_server,
    screenshot_dir,
    shopify: ShopifyStub,  # noqa: F811
):
    demo = load_demo()
    account = RailAccount(
        site=demo.site, rail="shopify", connected_account=SHOP, api_base=shopify.url
    )
    account.set_secret(TOKEN)
    account.save()
    shopify.add_order(total="64.00")
    shopify.add_order(total="18.50")
    sync_orders(site=demo.site)
    RailAccount.objects.filter(pk=account.pk).update(connected_account="new-shop.myshopify.com")

    # bypass_csp: axe-core is injected as a script (tests/e2e/accessibility.py).
    context = browser.new_context(viewport={"width": 1440, "height": 900}, bypass_csp=True)
    page = context.new_page()
    try:
        log_in(page, live_server.url, "owner@northwind-coffee.example")
        page.goto(f"{live_server.url}/settings/rails/")
        card = page.locator("#rail-shopify .left-behind")
        expect(card).to_contain_text(f"2 orders from {SHOP} ($82.50 still refundable)")
        assert run_axe(page) == []
        card.scroll_into_view_if_needed()
        page.screenshot(path=screenshot_dir / "rails-left-behind.png", full_page=True)
        page.locator("#rail-shopify").screenshot(path=screenshot_dir / "rails-left-behind-card.png")
        page.set_viewport_size({"width": 390, "height": 844})
        assert horizontal_overflow(page) is None
        page.screenshot(path=screenshot_dir / "rails-left-behind-phone.png", full_page=True)
        page.locator("#rail-shopify").screenshot(
            path=screenshot_dir / "rails-left-behind-card-phone.png"
        )
    finally:
        context.close()
