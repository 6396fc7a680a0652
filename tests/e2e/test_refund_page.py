"""The refund page of a staff refund that was never held, and Activity's filters (Chromium)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, load_demo
from refunds.models import Refund
from sill.accounts.models import Agent
from sill.orders.models import Order
from tests.e2e.conftest import log_in
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"wide": (1440, 900), "phone": (390, 844)}


@pytest.fixture
def staff_refund() -> Refund:
    """The demo's $12.00 staff refund of order #1002: approved by the rules, never held."""
    demo = load_demo()
    refund = Refund.objects.get(order=Order.objects.get(site=demo.site, number="1002"))
    assert refund.expires_at is None and refund.status == "succeeded", refund.status
    return refund


def _no_sideways_scroll(page: Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page scrolls sideways by {overflow}px"


@pytest.mark.parametrize("size", SIZES)
def test_the_refund_page_of_a_staff_refund_never_held(
    page: Page, live_server, screenshot_dir, staff_refund, size
):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    log_in(page, live_server.url, "staff@northwind-coffee.example")
    page.goto(f"{live_server.url}/refunds/{staff_refund.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Staff refund")
    status = page.locator("#refund-status")
    expect(status).to_contain_text("Succeeded")
    expect(status).not_to_have_attribute("hx-trigger", "every 3s")
    steps = page.locator("#refund-timeline li.step")
    expect(steps).to_have_count(3)  # request, decision, settlement: no review
    expect(steps.nth(0)).to_contain_text("Staff member staff@northwind-coffee.example asked")
    expect(steps.nth(1)).to_contain_text("Approved by the rules")
    expect(steps.nth(2)).to_contain_text("$12.00 refunded on Mock")
    expect(steps.nth(2)).to_contain_text(staff_refund.provider_refund_id)
    expect(page.get_by_role("link", name="Order #1002")).to_be_visible()
    raw = steps.nth(1).locator("details.raw")
    if raw.count():
        raw.locator("summary").click()
        expect(raw.locator("pre")).to_be_visible()
    _no_sideways_scroll(page)
    page.screenshot(path=screenshot_dir / f"refund-page-staff-{size}.png", full_page=True)


@pytest.mark.parametrize("size", SIZES)
def test_activity_filters_by_refund_and_kind(
    page: Page, live_server, screenshot_dir, staff_refund, size
):
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/activity/")
    page.get_by_label("Refund id").fill(staff_refund.pk)
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.data tbody tr")
    expect(rows).to_have_count(2)  # its decision and its settlement
    expect(page.get_by_text("2 records match these filters")).to_be_visible()
    expect(rows.first).to_contain_text("Settlement")
    expect(rows.first).to_contain_text("#1002")
    page.get_by_label("Kind").select_option("approved")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(rf"kind=approved&refund={staff_refund.pk}"))
    expect(rows.first).to_contain_text("staff@northwind-coffee.example")
    _no_sideways_scroll(page)
    page.screenshot(path=screenshot_dir / f"activity-filtered-{size}.png", full_page=True)

    # Every refund id links to its page.
    rows.first.get_by_role("link", name=staff_refund.pk).click()
    expect(page).to_have_url(f"{live_server.url}/refunds/{staff_refund.pk}/")


def test_the_refund_page_of_an_agent_refund_held_then_approved(
    page: Page, live_server, screenshot_dir
):
    demo = load_demo()
    order = Order.objects.get(site=demo.site, source_mandate_id=DEMO_ORDER_MANDATE)
    held = hold_refund(order=order, agent=Agent.objects.get(site=demo.site, agent_id=DEMO_AGENT_ID))
    log_in(page, live_server.url, "admin@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/{held.pk}/")
    page.get_by_label("Note").fill("Customer sent photos")
    page.get_by_role("button", name="Approve and refund $89.00").click()
    dialog = page.get_by_role("dialog")
    if dialog.count():
        dialog.get_by_role("button").last.click()
    expect(page.locator("#decision-panel")).to_contain_text("Succeeded")

    page.goto(f"{live_server.url}/refunds/{held.pk}/")
    steps = page.locator("#refund-timeline li.step")
    expect(steps).to_have_count(4)  # mandate, hold, review, settlement
    expect(steps.nth(0)).to_contain_text("sent a signed mandate")
    expect(steps.nth(1)).to_contain_text("Human review on destructive actions (r07)")
    expect(steps.nth(2)).to_contain_text("Approved by admin@northwind-coffee.example")
    expect(steps.nth(2)).to_contain_text("Customer sent photos")
    expect(steps.nth(3)).to_contain_text("$89.00 refunded on Mock")
    page.screenshot(path=screenshot_dir / "refund-page-agent-held.png", full_page=True)
