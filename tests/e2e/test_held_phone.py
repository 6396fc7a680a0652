"""An owner decides held refunds on a phone (390 x 844), as the held-refund email leads them to.

Approving goes through the one confirmation (sill.js's dialog) naming amount, buyer and rail;
an approved row on the held list updates itself while the refund executes (htmx polling), with
no reload (the reported defect: it stayed "Processing" forever).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, load_demo
from refunds.execution import execute_refund
from refunds.models import Refund
from sill.accounts.models import Agent
from sill.orders.models import Order
from tests.e2e.conftest import log_in
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def demo_held() -> Refund:
    demo = load_demo()
    order = Order.objects.get(site=demo.site, source_mandate_id=DEMO_ORDER_MANDATE)
    agent = Agent.objects.get(site=demo.site, agent_id=DEMO_AGENT_ID)
    return hold_refund(order=order, agent=agent)


def _no_sideways_scroll(page: Page, width: int) -> None:
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{page.url} is {scroll}px wide at {width}px"


@pytest.fixture
def queued_execution():
    """Approvals queue their execution (to the purged broker) instead of running it eagerly,
    so the page sees the refund in flight; the test runs it by hand, as a worker would."""
    from sill.celery import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    app.control.purge()
    yield
    app.conf.task_always_eager = eager


def test_an_owner_approves_on_a_phone_through_the_confirmation(
    page: Page, live_server, screenshot_dir, demo_held
):
    page.set_viewport_size(PHONE)
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/{demo_held.id}/")
    for width in (360, 390):
        page.set_viewport_size({"width": width, "height": 844})
        _no_sideways_scroll(page, width)
    # The decision comes first, and its buttons stay at the bottom of the screen.
    panel = page.locator("#decision-panel")
    approve = page.get_by_role("button", name="Approve and refund $89.00")
    expect(approve).to_be_in_viewport()
    order_heading = page.get_by_role("heading", name="Original order #1001")
    assert panel.bounding_box()["y"] < order_heading.bounding_box()["y"]
    page.screenshot(path=screenshot_dir / "phone-held-detail-top.png", full_page=False)
    page.mouse.wheel(0, 2000)
    expect(approve).to_be_in_viewport()
    page.screenshot(path=screenshot_dir / "phone-held-detail.png", full_page=False)
    page.evaluate("window.scrollTo(0, 0)")

    approve.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Refund $89.00 to Ada Lovelace")
    page.screenshot(path=screenshot_dir / "phone-held-confirm.png", full_page=False)
    assert Refund.objects.get(pk=demo_held.pk).status == "held"
    dialog.get_by_role("button", name="Approve and refund $89.00").click()
    expect(panel).to_contain_text("Approved: $89.00 was refunded on Mock.")
    _no_sideways_scroll(page, PHONE["width"])
    page.screenshot(path=screenshot_dir / "phone-held-approved.png", full_page=True)
    assert Refund.objects.get(pk=demo_held.pk).status == "succeeded"


def test_the_held_list_is_cards_on_a_phone_and_an_approved_row_updates_itself(
    page: Page, live_server, screenshot_dir, demo_held, queued_execution
):
    page.set_viewport_size(PHONE)
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/")
    row = page.locator(f"#held-row-{demo_held.id}")
    expect(page.locator("tbody.held-group tr.group-head")).to_contain_text("Order #1001")
    expect(row).to_contain_text("Refund request · Wrong item")
    for width in (360, 390):
        page.set_viewport_size({"width": width, "height": 844})
        _no_sideways_scroll(page, width)
    page.screenshot(path=screenshot_dir / "phone-held-list.png", full_page=True)

    row.get_by_role("button", name="Approve").click()
    page.get_by_role("dialog").get_by_role("button", name="Approve and refund $89.00").click()
    expect(row).to_contain_text("is being refunded on Mock")
    expect(row).to_contain_text("Processing")
    execute_refund(demo_held.id)  # the worker's part
    # No reload: the row polls every 3 s while the refund is in flight.
    expect(row).to_contain_text("Approved: $89.00 was refunded on Mock.", timeout=10_000)
    expect(row).to_contain_text("Succeeded")
    expect(row).not_to_have_attribute("hx-trigger", "every 3s")
    page.screenshot(path=screenshot_dir / "phone-held-row-settled.png", full_page=True)


def test_without_javascript_the_server_asks_to_confirm(
    browser, live_server, screenshot_dir, demo_held
):
    context = browser.new_context(java_script_enabled=False, viewport=PHONE)
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/login/")
        log_in(page, live_server.url, "owner@northwind-coffee.example")
        page.goto(f"{live_server.url}/held/{demo_held.id}/")
        page.get_by_role("button", name="Approve and refund $89.00").click()
        expect(page.get_by_role("heading", name="Approve and refund $89.00?")).to_be_visible()
        expect(page.get_by_text("Refund $89.00 to Ada Lovelace")).to_be_visible()
        assert Refund.objects.get(pk=demo_held.pk).status == "held"
        _no_sideways_scroll(page, PHONE["width"])
        page.screenshot(path=screenshot_dir / "phone-held-confirm-nojs.png", full_page=True)
        page.get_by_role("button", name="Approve and refund $89.00").click()
        expect(page.get_by_text("Approved: $89.00 was refunded on Mock.")).to_be_visible()
        assert Refund.objects.get(pk=demo_held.pk).status == "succeeded"
    finally:
        context.close()
