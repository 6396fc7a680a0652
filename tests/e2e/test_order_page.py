from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_ORDER_MANDATE, DEMO_PASSWORD, load_demo

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_it_logs_in_and_opens_the_demo_order(page: Page, live_server, screenshot_dir):
    load_demo()
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Email").fill("owner@northwind-coffee.example")
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
    page.screenshot(path=screenshot_dir / "dashboard.png", full_page=True)

    page.get_by_role("link", name="Orders", exact=True).click()
    page.get_by_placeholder("Order number, email or mandate id").fill(DEMO_ORDER_MANDATE)
    page.get_by_role("button", name="Search").click()
    page.get_by_role("link", name="#1001").click()
    expect(page.get_by_role("heading", name="Order #1001")).to_be_visible()
    expect(page.get_by_text("Ceramic Pour-Over Dripper")).to_be_visible()
    expect(page.locator("article.charge")).to_contain_text("$89.00")
    page.screenshot(path=screenshot_dir / "order-detail.png", full_page=True)

    page.get_by_role("tab", name="Transactions").click()
    expect(page.locator("#transactions")).to_contain_text("Charge")
    expect(page).to_have_url(
        f"{live_server.url}/orders/{page.url.split('/orders/')[1].split('/')[0]}/?tab=transactions"
    )
    page.screenshot(path=screenshot_dir / "order-transactions.png", full_page=True)
