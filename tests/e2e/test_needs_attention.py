"""A refund, and a purchase's charge, that need attention, as an owner sees and resolves them
in the browser."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_AGENT_ID, load_demo
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundReason
from refunds.staff.services import create_staff_refund
from sill.accounts.models import Agent, Membership, Site
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.orders.services import NewLine, create_order
from sill.rails.models import MockLedgerEntry, RailAccount
from tests.e2e.accessibility import horizontal_overflow, run_axe
from tests.e2e.conftest import log_in
from tests.orders.in_doubt import charge_in_doubt

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
    page.locator(f"#attention-{refund.id}").get_by_role("button", name="Continue").click()
    # It asks first, on the page: the reservation is released, the amount refundable again.
    confirm = page.locator(f"#attention-confirm-{refund.id}")
    expect(confirm).to_contain_text(f"{refund.amount} is refundable again")
    assert Refund.objects.get(pk=refund.pk).status == "needs_attention"
    confirm.get_by_role("button", name="Record: no refund").click()
    expect(page.get_by_text("nothing was refunded")).to_be_visible()
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "not_at_rail")


def _charge_in_doubt() -> Charge:
    """An order the demo agent bought whose charge the rail made and never confirmed; the
    rail is then switched off, so only a person can settle it."""
    result = load_demo()
    site = Site.objects.get(pk=result.site.pk)
    order = create_order(
        site=site,
        lines=[
            NewLine(sku="NW-HB-1KG", name="House Blend", quantity=2, unit_price=Money(2400, "USD"))
        ],
        currency="USD",
        buyer_name="Ada Lovelace",
        buyer_email="ada@example.com",
        source_mandate_id="mnd_e2e_charge_in_doubt",
        placed_by_agent=Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID),
    )
    return charge_in_doubt(order)


def test_an_owner_records_a_charge_the_rail_never_confirmed(
    browser: Browser, live_server, screenshot_dir
):
    charge = _charge_in_doubt()
    made = MockLedgerEntry.objects.get(
        kind="charge", idempotency_key=f"sill-charge-{charge.order_id}"
    )
    # bypass_csp: axe-core is injected as a script (tests/e2e/accessibility.py).
    context = browser.new_context(viewport={"width": 1440, "height": 900}, bypass_csp=True)
    page = context.new_page()
    try:
        log_in(page, live_server.url, "owner@northwind-coffee.example")
        page.goto(f"{live_server.url}/orders/{charge.order_id}/")
        card = page.locator("article.charge")
        expect(card).to_contain_text("Needs attention")
        page.get_by_text("Record what Mock's dashboard shows").click()
        expect(card).to_contain_text(f"sill-charge-{charge.order_id}")
        assert run_axe(page) == []
        page.screenshot(path=screenshot_dir / "charge-attention-order.png", full_page=True)

        page.get_by_label("Charged", exact=True).check()
        page.get_by_label("Its charge id").fill(made.provider_charge_id)
        page.get_by_label("Note (optional, kept in the signed audit log)").fill(
            "In the mock ledger"
        )
        page.get_by_role("button", name="Continue").click()

        # Nothing is written until the owner confirms what it will do.
        confirm = page.locator(f"#charge-attention-{charge.pk}")
        expect(confirm).to_contain_text("Record that Mock charged the buyer $48.00")
        assert Charge.objects.get(pk=charge.pk).status == "pending"
        assert run_axe(page) == []
        page.screenshot(path=screenshot_dir / "charge-attention-confirm.png", full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        assert horizontal_overflow(page) is None
        page.screenshot(path=screenshot_dir / "charge-attention-confirm-phone.png", full_page=True)
        page.set_viewport_size({"width": 1440, "height": 900})

        page.get_by_role("button", name="Record: charged").click()
        expect(page.get_by_text("Recorded: Mock charged $48.00")).to_be_visible()
        expect(page.locator("#order-status-badge")).to_contain_text("Paid")
        page.screenshot(path=screenshot_dir / "charge-attention-recorded.png", full_page=True)
    finally:
        context.close()
    charge.refresh_from_db()
    assert (charge.status, charge.provider_charge_id) == ("succeeded", made.provider_charge_id)
