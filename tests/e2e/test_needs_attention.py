"""A refund that needs attention, as an owner sees and resolves it in the browser."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundReason
from refunds.staff.services import create_staff_refund
from sill.accounts.models import Membership, Site
from sill.orders.models import Order
from sill.rails.models import RailAccount
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _flagged_refund() -> Refund:
    """A staff refund whose answer was lost, then the rail was switched off."""
    result = load_demo()
    site = Site.objects.get(pk=result.site.pk)
    order = Order.objects.filter(site=site, status="PAID").order_by("number").last()
    rail = RailAccount.objects.get(site=site, rail="mock")
    rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    rail.save()
    staff = Membership.objects.get(site=site, role="staff").user
    leaf = RefundReason.objects.filter(site=site, active=True, numchild=0).first()
    # No worker runs here, and an eager execution on commit would retry until it succeeds:
    # queue it to the (purged) broker instead and run the attempts by hand, as a worker would.
    from sill.celery import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    try:
        app.control.purge()
        refund = create_staff_refund(site=site, order=order, actor=staff, kind="full", reason=leaf)
    finally:
        app.conf.task_always_eager = eager
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    rail.enabled = False
    rail.save()
    assert execute_refund(refund.id) == "needs_attention"
    return Refund.objects.get(pk=refund.pk)


def test_an_owner_sees_a_refund_needing_attention_and_records_the_dashboard(
    page: Page, live_server, screenshot_dir
):
    refund = _flagged_refund()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    expect(page.get_by_role("heading", name="Refunds that need attention")).to_be_visible()
    page.screenshot(path=screenshot_dir / "attention-dashboard.png", full_page=True)

    page.get_by_role("link", name=f"#{refund.order.number}").first.click()
    expect(page.locator(f"#attention-{refund.id}")).to_contain_text(refund.idempotency_key)
    page.get_by_text("Record what the provider's dashboard shows").click()
    page.screenshot(path=screenshot_dir / "attention-order.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=screenshot_dir / "attention-order-phone.png", full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})

    page.get_by_label("No refund was made (the reservation is released)").check()
    page.get_by_role("button", name="Record it").click()
    expect(page.get_by_text("nothing was refunded")).to_be_visible()
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "not_at_rail")
