"""A staff member issues a 25 % refund with a leaf reason from the order page (Chromium)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_ORDER_MANDATE, DEMO_SITE_ID, load_demo
from refunds.models import Refund, RefundReason
from refunds.reasons.selectors import PATH_SEPARATOR
from refunds.reasons.services import add_reason
from sill.accounts.models import Site
from sill.orders.models import Order
from tests.conftest import site_owner
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_staff_issue_a_25_percent_refund_with_a_leaf_reason(
    page: Page, live_server, screenshot_dir
):
    load_demo()
    site = Site.objects.get(pk=DEMO_SITE_ID)
    product = add_reason(site=site, actor=site_owner(site), name="Product problem")
    leaf = add_reason(site=site, actor=site_owner(site), name="Arrived broken", parent=product)
    add_reason(site=site, actor=site_owner(site), name="Wrong grind", parent=product)
    order = Order.objects.get(site=site, source_mandate_id=DEMO_ORDER_MANDATE)

    log_in(page, live_server.url, "staff@northwind-coffee.example")
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{live_server.url}/orders/{order.id}/")
    panel = page.locator("#refund-panel")
    expect(panel.get_by_role("heading", name="Refund")).to_be_visible()
    expect(panel.locator("#refund-remaining")).to_have_text("$89.00")

    # Typing the percentage selects the type and shows the concrete amount before submitting.
    panel.get_by_role("textbox", name="Percent of the order total").fill("25")
    expect(panel.get_by_role("radio", name="Percentage of the order total")).to_be_checked()
    expect(panel.locator("#refund-preview")).to_contain_text("You are refunding $22.25")
    expect(panel.locator("#refund-preview")).to_contain_text("rounded half up to $0.01")

    # The picker offers leaves; the category is only a heading.
    picker = panel.get_by_label("Reason")
    expect(picker.locator('optgroup[label="Product problem"] option')).to_have_count(2)
    picker.select_option(label="Arrived broken")
    expect(picker).to_have_value(str(leaf.pk))
    panel.get_by_label("Note (optional)").fill("Mug arrived chipped")
    page.screenshot(path=screenshot_dir / "staff-refund-form.png", full_page=True)
    # The preview's requests inherited the form's hx-disabled-elt, whose "find button" found
    # nothing from the preview: a console error on every keystroke.
    assert not [e for e in errors if "hx-disabled-elt" in e], errors

    panel.get_by_role("button", name="Refund", exact=True).click()
    # One confirmation before money moves: the computed amount, the buyer, the rail.
    confirm = page.locator("#refund-panel .refund-confirm")
    expect(confirm).to_contain_text("Refund $22.25 to Ada Lovelace")
    expect(confirm).to_contain_text("on Mock")
    expect(confirm).to_contain_text("25% of the $89.00 order total is $22.25")
    assert not Refund.objects.filter(order=order).exists()
    page.screenshot(path=screenshot_dir / "staff-refund-confirm.png", full_page=True)
    desktop = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    confirm.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_dir / "phone-staff-refund-confirm.png", full_page=False)
    page.set_viewport_size(desktop)
    confirm.get_by_role("button", name="Refund $22.25").click()
    expect(page).to_have_url(f"{live_server.url}/orders/{order.id}/?tab=transactions")
    expect(page.get_by_role("heading", name="Order #1001")).to_contain_text("Partially refunded")
    expect(page.get_by_role("status").first).to_contain_text("$22.25")
    row = page.locator("#transactions tr.tx-refund")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Succeeded")
    expect(row).to_contain_text("\u2212$22.25")  # a minus sign
    expect(row).to_contain_text(f"Product problem{PATH_SEPARATOR}Arrived broken")
    expect(row).to_contain_text("staff@northwind-coffee.example")
    expect(row).to_contain_text("mock_re_")
    page.screenshot(path=screenshot_dir / "staff-refund-transactions.png", full_page=True)

    refund = Refund.objects.get(order=order)
    assert (refund.amount_minor, refund.status, refund.origin) == (2225, "succeeded", "staff")
    assert refund.reason_label == "Arrived broken" and refund.note == "Mug arrived chipped"
    order.refresh_from_db()
    assert order.status == "PARTIALLY_REFUNDED"

    # Back on the overview, the form offers what is left.
    page.get_by_role("tab", name="Overview").click()
    expect(page.locator("#refund-remaining")).to_have_text("$66.75")
    expect(page.get_by_role("tab", name="Overview")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("tab", name="Transactions")).not_to_have_attribute(
        "aria-selected", "true"
    )
    page.screenshot(path=screenshot_dir / "staff-refund-after.png", full_page=True)


def test_an_owner_manages_refund_reasons(page: Page, live_server, screenshot_dir):
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.get_by_role("link", name="Settings", exact=True).click()
    page.get_by_role("link", name="Refund reasons").click()
    expect(page.get_by_role("heading", name="Refund reasons")).to_be_visible()
    form = page.locator("form.reason-add-form")
    form.get_by_label("Name").fill("Product problem")
    form.get_by_role("button", name="Add reason").click()
    expect(page.get_by_role("status").first).to_contain_text("Added “Product problem”")

    site = Site.objects.get(pk=DEMO_SITE_ID)
    product = RefundReason.objects.get(site=site, name="Product problem")
    row = page.locator(f"#reason-{product.pk}")
    row.get_by_text("Edit").click()
    row.get_by_label("Add a sub-reason").fill("Arrived broken")
    row.get_by_role("button", name="Add", exact=True).click()
    broken = RefundReason.objects.get(site=site, name="Arrived broken")
    expect(page.locator(f"#reason-{broken.pk}")).to_contain_text("In picker")
    expect(page.locator(f"#reason-{product.pk}")).to_contain_text("Category")

    other = RefundReason.objects.get(site=site, code="other")
    page.locator(f"#reason-{other.pk}").get_by_role("button", name="Deactivate").click()
    expect(page.locator(f"#reason-{other.pk}")).to_contain_text("Inactive")
    page.screenshot(path=screenshot_dir / "refund-reasons.png", full_page=True)

    # Move "Arrived broken" to the top level from its Edit panel.
    row = page.locator(f"#reason-{broken.pk}")
    row.get_by_text("Edit").click()
    expect(row.get_by_label("Move under")).to_be_visible()
    page.screenshot(path=screenshot_dir / "refund-reasons-edit.png", full_page=True)
    row.get_by_label("Move under").select_option(label="— Top level —")
    row.get_by_role("button", name="Move").click()
    expect(page.get_by_role("status").first).to_contain_text("to the top level")
    broken.refresh_from_db()
    assert broken.depth == 1
