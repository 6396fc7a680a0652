"""Every main page works under the Content-Security-Policy in Chromium: an owner goes through
them, htmx interactions included, and the browser reports no CSP violation and no script
error."""

from __future__ import annotations

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, load_demo
from refunds.models import Refund
from sill.accounts.models import Agent
from sill.orders.models import Order
from tests.e2e.conftest import log_in
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Runs in every page before its own scripts, outside the page's CSP (Playwright injects it
# through the DevTools protocol), and reports each violation to the console.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def demo_held() -> Refund:
    demo = load_demo()
    order = Order.objects.get(site=demo.site, source_mandate_id=DEMO_ORDER_MANDATE)
    agent = Agent.objects.get(site=demo.site, agent_id=DEMO_AGENT_ID)
    return hold_refund(order=order, agent=agent)


@pytest.fixture
def problems(page: Page) -> list[str]:
    found: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        text = message.text
        if "Content Security Policy" in text or "CSP violation" in text:
            found.append(f"{page.url}: {text}")

    page.add_init_script(REPORT_VIOLATIONS)
    page.on("console", on_console)
    page.on("pageerror", lambda error: found.append(f"{page.url}: script error {error}"))
    return found


def test_an_owner_uses_every_main_page_with_no_csp_violation(
    page: Page, live_server, screenshot_dir, demo_held, problems
):
    base = live_server.url
    page.on("dialog", lambda dialog: dialog.dismiss())
    log_in(page, base, "owner@northwind-coffee.example")
    expect(page.locator("#held-count")).to_have_text("1")  # the dashboard, with its badge

    # Orders: the htmx search swaps the results in place.
    page.goto(f"{base}/orders/")
    page.get_by_placeholder("Order number, email or mandate id").press_sequentially("grace@")
    expect(page.locator("#results")).not_to_contain_text("#1001")
    expect(page.locator("#results")).to_contain_text("#1002")

    # The order page: both tabs through htmx, back and forth, then the refund form's preview.
    order = Order.objects.get(site=demo_held.site, number="1002")
    page.goto(f"{base}/orders/{order.id}/")
    expect(page.get_by_role("heading", name="Order #1002")).to_be_visible()
    page.get_by_role("tab", name="Transactions").click()
    expect(page).to_have_url(f"{base}/orders/{order.id}/?tab=transactions")
    expect(page.locator("#transactions")).to_contain_text("Charge")
    expect(page.get_by_role("tab", name="Transactions")).to_have_attribute("aria-selected", "true")
    page.get_by_role("tab", name="Overview").click()
    expect(page).to_have_url(f"{base}/orders/{order.id}/?tab=overview")
    expect(page.get_by_text("Espresso Roast, 500 g")).to_be_visible()
    panel = page.locator("#refund-panel")
    panel.get_by_role("textbox", name="Percent of the order total").fill("10")
    expect(panel.get_by_role("radio", name="Percentage of the order total")).to_be_checked()
    expect(panel.locator("#refund-preview")).to_contain_text("You are refunding")
    page.screenshot(path=screenshot_dir / "csp-order-refund-form.png", full_page=True)

    # Held refunds: the list (with its live countdown) and the detail.
    page.goto(f"{base}/held/")
    row = page.locator(f"#held-row-{demo_held.id}")
    expect(row.locator("[data-countdown]")).to_contain_text("left")
    page.goto(f"{base}/held/{demo_held.id}/")
    expect(page.locator("#decision-panel")).to_be_visible()

    for path, heading in [
        ("/rules/", "Rules"),
        ("/activity/", "Activity"),
        ("/reconcile/", None),
        ("/settings/", "Settings"),
        ("/settings/reasons/", None),
        ("/settings/rails/", None),
        ("/settings/agents/", "Agents"),
        ("/settings/members/", None),
    ]:
        response = page.goto(f"{base}{path}")
        assert response is not None and response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        if heading:
            expect(page.get_by_role("heading", name=heading, exact=True).first).to_be_visible()
    page.screenshot(path=screenshot_dir / "csp-members.png", full_page=True)

    assert problems == []
