"""The page shell on a phone: the collapsing menu, the skip link, tables as cards, no-JS nav."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, load_demo
from sill.accounts.models import Agent
from sill.orders.models import Order
from tests.e2e.accessibility import horizontal_overflow
from tests.e2e.conftest import log_in
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
OWNER = "owner@northwind-coffee.example"  # an owner of both demo sites: the switcher shows


def test_the_phone_menu_folds_the_nav_and_the_site_switcher(
    browser: Browser, live_server, screenshot_dir
):
    site = load_demo().site
    order = Order.objects.get(site=site, source_mandate_id=DEMO_ORDER_MANDATE)
    hold_refund(order=order, agent=Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID))
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    log_in(page, live_server.url, OWNER)
    menu = page.get_by_role("button", name="Menu")
    expect(menu.locator(".count")).to_have_text("1")  # the folded Held badge, on the button
    orders = page.get_by_role("navigation", name="Main").get_by_role(
        "link", name="Orders", exact=True
    )
    switcher = page.get_by_label("Site")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_have_attribute("aria-controls", "site-menu")
    expect(orders).to_be_hidden()
    expect(switcher).to_be_hidden()

    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(orders).to_be_visible()
    expect(switcher).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    page.screenshot(path=screenshot_dir / "phone-menu-open.png")
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    expect(orders).to_be_hidden()

    # On a desktop the same page shows the nav and no menu button.
    page.set_viewport_size({"width": 1440, "height": 900})
    expect(menu).to_be_hidden()
    expect(orders).to_be_visible()
    context.close()


def test_the_skip_link_is_first_and_moves_focus_to_the_content(page: Page, live_server):
    load_demo()
    log_in(page, live_server.url, OWNER)
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    assert page.evaluate("document.activeElement.getBoundingClientRect().top") >= 0  # shown
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()
    # Focus is visible on the nav: the next Tab from the top lands on the brand, with a ring.
    page.reload()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert page.evaluate("document.activeElement.closest('nav') !== null")
    assert ring == "solid"


def test_tables_stack_into_labelled_cards_on_a_phone(browser: Browser, live_server):
    load_demo()
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    log_in(page, live_server.url, OWNER)
    page.goto(f"{live_server.url}/activity/")
    cell = page.locator("table.data tbody tr").first.locator("td").nth(1)
    expect(cell).to_have_attribute("data-label", "When")
    label = cell.evaluate("td => getComputedStyle(td, '::before').content")
    assert label == '"When"'
    assert page.locator("table.data thead").evaluate("t => t.getBoundingClientRect().height") <= 1
    assert horizontal_overflow(page) is None
    context.close()


def test_without_javascript_the_nav_wraps_and_stays_usable(browser: Browser, live_server):
    load_demo()
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    page = context.new_page()
    log_in(page, live_server.url, OWNER)
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Orders", exact=True)).to_be_visible()
    expect(page.get_by_label("Site")).to_be_visible()
    expect(page.get_by_role("button", name="Switch")).to_be_visible()
    assert horizontal_overflow(page) is None
    context.close()


def test_on_a_laptop_the_nav_stays_beside_the_brand_with_a_held_badge(
    browser: Browser, live_server, screenshot_dir
):
    # At 1280 px a held refund's badge made the bar one badge too wide: the menu dropped below
    # the brand whole and wrapped again, three rows (160 px of an 800 px laptop screen).
    site = load_demo().site
    order = Order.objects.get(site=site, source_mandate_id=DEMO_ORDER_MANDATE)
    hold_refund(order=order, agent=Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID))
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, live_server.url, OWNER)
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.locator("#held-count")).to_have_text("1")
    page.screenshot(path=screenshot_dir / "laptop-topbar-held.png")
    brand = nav.get_by_role("link", name="Sill", exact=True).bounding_box()
    first = nav.get_by_role("link", name="Dashboard").bounding_box()
    assert brand and first
    assert abs(brand["y"] + brand["height"] / 2 - (first["y"] + first["height"] / 2)) < 8
    height = page.locator("header.topbar").evaluate("h => h.getBoundingClientRect().height")
    assert height <= 130, f"the top bar is {height} px tall"
    assert horizontal_overflow(page) is None
    context.close()


FIELD_SHAPES = """
() => Array.from(document.querySelectorAll("main form[role=search] :is(input, select, button)"))
  .filter((el) => el.offsetParent !== null && !["checkbox", "radio", "hidden"].includes(el.type))
  .map((el) => {
    const st = getComputedStyle(el);
    const corners = [st.borderTopLeftRadius, st.borderTopRightRadius,
                     st.borderBottomRightRadius, st.borderBottomLeftRadius].join(" ");
    return `${el.name || el.textContent.trim()}: ${corners}`;
  })
"""


def test_the_filter_bars_fields_share_one_shape_on_a_phone(browser: Browser, live_server):
    # Pico draws a role="search" form as one joined pill; Sill's filter fields stand apart, so a
    # phone showed a pill select above a square one, pill date fields and a pill button.
    load_demo()
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    log_in(page, live_server.url, OWNER)
    for path in ("/orders/", "/refunds/", "/held/", "/activity/"):
        page.goto(f"{live_server.url}{path}")
        fields = page.evaluate(FIELD_SHAPES)
        assert len(fields) >= 4, (path, fields)
        shapes = {field.split(": ", 1)[1] for field in fields}
        assert len(shapes) == 1, f"{path}: {fields}"
    context.close()
