"""The held-refund page of a Shopify order in Chromium: the order Sill synced, with a link to
it in the Shopify admin. The store is the loopback stub (tests/rails/shopify_stub.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from sill.orders.models import Order
from sill.rails.models import RailAccount
from sill.rails.shopify.sync import sync_orders
from tests.e2e.conftest import log_in
from tests.rails.shopify_fixtures import shopify  # noqa: F401 (fixture)
from tests.rails.shopify_stub import SHOP, TOKEN, ShopifyStub
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_held_page_of_a_shopify_order_links_it_in_the_shopify_admin(
    page: Page,
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
    placed = shopify.add_order(total="64.00")
    sync_orders(site=demo.site)
    order = Order.objects.get(site=demo.site, charges__provider_payment_id=str(placed.id))
    staff = get_user_model().objects.get(username="staff@northwind-coffee.example")
    held = hold_refund(order=order, requested_by=staff, reason_code="wrong_item")

    log_in(page, live_server.url, "admin@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/{held.id}/")
    expect(page.get_by_text("House blend")).to_be_visible()
    link = page.get_by_role("link", name="View in Shopify admin ↗")
    expect(link).to_have_attribute("href", f"https://{SHOP}/admin/orders/{placed.id}")
    expect(page.locator("#decision-panel")).to_contain_text("$64.00")
    page.screenshot(path=screenshot_dir / "held-shopify.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=screenshot_dir / "held-shopify-phone.png", full_page=True)
