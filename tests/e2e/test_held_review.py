"""Held refunds in Chromium: an admin approves one and sees it succeed; a reviewer only looks."""

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

HEADLINE = "Refund request · Wrong item · up to $89.00"


@pytest.fixture
def demo_held() -> Refund:
    """The seed's example: the demo agent's refund of order #1001, held by rule r07."""
    demo = load_demo()
    order = Order.objects.get(site=demo.site, source_mandate_id=DEMO_ORDER_MANDATE)
    agent = Agent.objects.get(site=demo.site, agent_id=DEMO_AGENT_ID)
    return hold_refund(order=order, agent=agent)


def test_an_admin_approves_a_held_refund_and_sees_it_succeed(
    page: Page, live_server, screenshot_dir, demo_held
):
    log_in(page, live_server.url, "admin@northwind-coffee.example")
    counter = page.locator("#held-count")
    expect(counter).to_have_text("1")
    page.get_by_role("link", name=re.compile(r"^Held \d")).click()  # the nav, with its count
    expect(page.get_by_role("heading", name="Held refunds")).to_be_visible()
    row = page.locator(f"#held-row-{demo_held.id}")
    expect(row).to_contain_text(HEADLINE)
    expect(row).to_contain_text("agent_acme_shopper")
    expect(row.locator("[data-countdown]")).to_have_text(re.compile(r"^23h \d\dm \d\ds left$"))
    page.screenshot(path=screenshot_dir / "held-list.png", full_page=True)

    row.get_by_role("link", name=HEADLINE).click()
    expect(page.get_by_role("heading", name=HEADLINE)).to_be_visible()
    expect(page.get_by_text("Ceramic Pour-Over Dripper")).to_be_visible()
    expect(page.get_by_text("Ada Lovelace", exact=True)).to_be_visible()
    page.screenshot(path=screenshot_dir / "held-detail.png", full_page=True)

    page.get_by_label(re.compile("^Note")).fill("Wrong grind shipped; photos attached to ticket.")
    page.get_by_role("button", name="Approve and refund $89.00").click()
    # One confirmation, naming the amount, the buyer and the rail, before money moves.
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Refund $89.00 to Ada Lovelace")
    expect(dialog).to_contain_text("on Mock")
    assert Refund.objects.get(pk=demo_held.pk).status == "held"
    page.screenshot(path=screenshot_dir / "held-detail-confirm.png", full_page=True)
    dialog.get_by_role("button", name="Approve and refund $89.00").click()
    panel = page.locator("#decision-panel")
    expect(panel).to_contain_text("Approved: $89.00 was refunded on Mock.")
    expect(panel).to_contain_text("Succeeded")
    expect(page.locator("#refund-status")).to_contain_text("Succeeded")
    expect(counter).to_be_hidden()  # swapped out of band, no reload
    expect(page.locator("#decision-record")).to_contain_text("Escalated, then approved")
    expect(page.locator("#decision-record")).to_contain_text("Settlement")
    page.screenshot(path=screenshot_dir / "held-approved.png", full_page=True)

    demo_held.refresh_from_db()
    assert (demo_held.status, demo_held.decision) == ("succeeded", "approved")
    assert demo_held.decided_by.get_username() == "admin@northwind-coffee.example"


def test_an_owner_rejects_from_the_list_after_confirming(
    page: Page, live_server, screenshot_dir, demo_held
):
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/")
    row = page.locator(f"#held-row-{demo_held.id}")
    row.get_by_role("button", name="Reject").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Nothing will be refunded")
    dialog.get_by_role("button", name="Reject").click()
    expect(row).to_contain_text("Rejected: nothing was refunded.")
    expect(page.locator("#held-count")).to_be_hidden()
    page.screenshot(path=screenshot_dir / "held-rejected-row.png", full_page=True)
    demo_held.refresh_from_db()
    assert (demo_held.status, demo_held.outcome_code) == ("rejected", "rejected_by_reviewer")

    page.reload()
    expect(page.get_by_text("Nothing is waiting for review.")).to_be_visible()
    page.screenshot(path=screenshot_dir / "held-empty.png", full_page=True)


def test_a_reviewer_sees_no_decision_buttons(page: Page, live_server, screenshot_dir, demo_held):
    log_in(page, live_server.url, "reviewer@northwind-coffee.example")
    page.goto(f"{live_server.url}/held/")
    expect(page.locator(f"#held-row-{demo_held.id}")).to_contain_text(HEADLINE)
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    page.screenshot(path=screenshot_dir / "held-list-reviewer.png", full_page=True)

    page.get_by_role("link", name=HEADLINE).click()
    expect(page.get_by_role("heading", name=HEADLINE)).to_be_visible()
    expect(page.get_by_text("an owner or admin approves or rejects them")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("Approve|Reject"))).to_have_count(0)
    expect(page.locator("textarea")).to_have_count(0)
    page.screenshot(path=screenshot_dir / "held-detail-reviewer.png", full_page=True)
