"""Settings → Rails: "Test connection" answers inline on the card (htmx), at 1440x900 and
390x844, without horizontal scrolling on the phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_owner_tests_the_mock_rail(page: Page, live_server, screenshot_dir):
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/settings/rails/")
    card = page.locator("#rail-mock")
    card.get_by_role("button", name="Test connection").click()
    expect(page.locator("#rail-check-result-mock")).to_contain_text(
        "Connected to Sill's mock rail (no money moves) · test mode"
    )
    page.screenshot(path=screenshot_dir / "rails-test-connection-desktop.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    page.locator("#rail-mock").screenshot(path=screenshot_dir / "rails-test-connection-phone.png")
