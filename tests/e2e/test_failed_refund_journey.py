"""Journey: a refund fails at the rail; the owner finds it from the dashboard's to-do strip,
follows it to the order and reads why it failed and what to do (desktop and phone)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from refunds.models import RefundReason, RefundStatus
from refunds.staff.services import create_staff_refund
from sill.accounts.models import Membership, Site
from sill.orders.models import Order
from sill.rails.models import RailAccount
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _declined_refund() -> Order:
    """A staff refund the mock rail declines (its execution runs eagerly on commit)."""
    site = Site.objects.get(pk=load_demo().site.pk)
    order = Order.objects.filter(site=site, status="PAID").order_by("number").last()
    assert order is not None
    rail = RailAccount.objects.get(site=site, rail="mock")
    rail.config = {"refund": "decline"}
    rail.save()
    staff = Membership.objects.get(site=site, role="staff").user
    leaf = RefundReason.objects.filter(site=site, active=True, numchild=0).first()
    refund = create_staff_refund(site=site, order=order, actor=staff, kind="full", reason=leaf)
    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED, (refund.status, refund.outcome_code)
    return order


def _no_horizontal_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at 390 px"


def test_an_owner_finds_a_failed_refund_from_the_dashboard(page: Page, live_server, screenshot_dir):
    order = _declined_refund()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    todo = page.locator(".todo-failed a")
    expect(todo).to_contain_text("1")
    expect(todo).to_contain_text("Failed, not refunded again")
    page.screenshot(path=screenshot_dir / "failed-journey-dashboard.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    _no_horizontal_scroll(page)
    page.screenshot(path=screenshot_dir / "failed-journey-dashboard-phone.png", full_page=True)
    page.locator(".charts").scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "failed-journey-dashboard-phone-charts.png")
    page.set_viewport_size({"width": 1440, "height": 900})

    todo.click()
    expect(page.get_by_role("heading", name="Refunds")).to_be_visible()
    expect(page.locator("#results")).to_contain_text("Declined by the rail")
    page.screenshot(path=screenshot_dir / "failed-journey-refunds.png", full_page=True)
    page.get_by_role("link", name=f"#{order.number}").first.click()

    banner = page.locator("#refund-status .banner-bad")
    expect(banner).to_contain_text("failed: Declined by the rail.")
    expect(banner).to_contain_text("Refund again from the form below")
    page.screenshot(path=screenshot_dir / "failed-journey-order.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    expect(banner).to_be_visible()
    _no_horizontal_scroll(page)
    page.screenshot(path=screenshot_dir / "failed-journey-order-phone.png", full_page=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=screenshot_dir / "failed-journey-order-phone-top.png")

    page.goto(f"{live_server.url}/orders/?status=refund_failed")
    expect(page.locator("#results")).to_contain_text(f"#{order.number}")
    expect(page.locator("#results")).to_contain_text("Refund failed")
    _no_horizontal_scroll(page)
    page.screenshot(path=screenshot_dir / "failed-journey-orders-phone.png", full_page=True)
    page.goto(f"{live_server.url}/refunds/?status=failures")
    expect(page.locator("#results")).to_contain_text("Declined by the rail")
    _no_horizontal_scroll(page)
    page.screenshot(path=screenshot_dir / "failed-journey-refunds-phone.png", full_page=True)


def test_a_settled_refund_appears_on_the_order_page_without_a_reload(
    page: Page, live_server, screenshot_dir
):
    """The status area polls while the refund is processing and shows it settled."""
    from refunds.execution import execute_refund
    from sill.celery import app

    site = Site.objects.get(pk=load_demo().site.pk)
    order = Order.objects.filter(site=site, status="PAID").order_by("number").last()
    assert order is not None
    staff = Membership.objects.get(site=site, role="staff").user
    leaf = RefundReason.objects.filter(site=site, active=True, numchild=0).first()
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False  # queue it (to the purged broker); run it by hand below
    try:
        app.control.purge()
        refund = create_staff_refund(site=site, order=order, actor=staff, kind="full", reason=leaf)
    finally:
        app.conf.task_always_eager = eager
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/orders/{order.id}/")
    status = page.locator("#refund-status")
    expect(status).to_contain_text("is being sent to Mock")
    expect(status).to_have_attribute("hx-trigger", "every 3s")

    assert execute_refund(refund.id) == "succeeded"
    expect(status).to_contain_text("refunded on Mock", timeout=10_000)
    expect(status).not_to_have_attribute("hx-trigger", "every 3s")
    expect(page.locator("#order-status-badge")).to_have_text("Refunded")  # out of band
    page.screenshot(path=screenshot_dir / "live-status-settled.png")
