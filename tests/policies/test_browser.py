"""The rules pages in Chromium: gallery → preview → apply, htmx toggles, AUTO-REFUND."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from sill.accounts.services import add_member

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct-horse-battery-staple"


def log_in(page: Page, live_server, email: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def test_an_owner_applies_a_template_and_toggles_it(page: Page, live_server, site, screenshot_dir):
    add_member(site=site, email="owner@roasters.example", role="owner", password=PASSWORD)
    log_in(page, live_server, "owner@roasters.example")
    page.get_by_role("link", name="Rules", exact=True).click()
    expect(page.locator("#policy-version")).to_have_text("v1-default")

    page.get_by_role("button", name="New rules from the catalog").click()
    card = page.locator("#card-conservative")
    card.get_by_label("Hold refunds over (USD)").fill("60.00")
    card.get_by_role("button", name="Preview").click()
    expect(page.locator("#preview-rules")).to_contain_text("Refund amount in USD > $60.00")
    page.screenshot(path=screenshot_dir / "policies-preview.png", full_page=True)
    page.get_by_role("button", name="Apply 1 rule (enforced)").click()

    expect(page).to_have_url(f"{live_server.url}/rules/")
    expect(page.locator(".flash-success")).to_contain_text("(tpl-conservative), enforced")
    expect(page.locator("#policy-version")).to_have_text("v2")

    # htmx swaps the rules section in place: no navigation, new version, new mode.
    page.evaluate("window.__marker = 'same page'")
    page.locator("#rule-tpl-conservative").get_by_role("button", name="Observe only").click()
    expect(page.locator("#policy-version")).to_have_text("v3")
    expect(page.locator("#rule-tpl-conservative")).to_contain_text("Observe")
    assert page.evaluate("window.__marker") == "same page"
    expect(page.locator("#versions")).to_contain_text(
        "Rule “Conservative / manual review” (tpl-conservative) now observed only"
    )

    page.get_by_label("Auto-approve refunds under cap").check()
    page.get_by_label("Maximum auto-approve amount").fill("25.00")
    page.locator("#auto-refund").get_by_role("button", name="Save").click()
    expect(page.locator("#auto-refund")).to_contain_text("Auto-refund is on, cap $25.00")
    page.get_by_label("Maximum auto-approve amount").fill("abc")
    page.locator("#auto-refund").get_by_role("button", name="Save").click()
    expect(page.locator("#auto-refund .flash-error")).to_contain_text("Enter an amount")
    page.screenshot(path=screenshot_dir / "policies-rules.png", full_page=True)


def test_a_reviewer_reads_the_rules(page: Page, live_server, site, owner, apply_template):
    apply_template("support-refunds", mode="observe")
    add_member(site=site, email="reviewer@roasters.example", role="reviewer", password=PASSWORD)
    log_in(page, live_server, "reviewer@roasters.example")
    page.goto(f"{live_server.url}/rules/")
    expect(page.locator("#rules")).to_contain_text("tpl-disputed-deny")
    expect(page.get_by_role("button", name="Enforce")).to_have_count(0)
    expect(page.locator("#auto-refund-state")).to_have_text("Off")


def test_an_owner_protects_refunds_previews_and_restores(
    page: Page, live_server, site, screenshot_dir, client, sign, make_order, agent, mock_rail
):
    from tests.refunds.conftest import ORIGINAL, post, refund_intent

    add_member(site=site, email="owner@roasters.example", role="owner", password=PASSWORD)
    make_order(total="89.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    post(client, sign(refund_intent(ORIGINAL)))  # one approved agent refund to replay
    log_in(page, live_server, "owner@roasters.example")
    # The preview lists the refund the catalog's r07 would have held, with its money.
    page.goto(f"{live_server.url}/rules/templates/r07/")
    expect(page.locator("#preview-affected")).to_contain_text("$89.00")
    expect(page.locator("#preview-affected")).to_contain_text("Held for approval")
    page.screenshot(path=screenshot_dir / "rules-preview-affected.png", full_page=True)

    page.goto(f"{live_server.url}/rules/")

    # A rule of the merchant's own, in words: hold refunds of half the order or more.
    protect = page.locator("#protect")
    protect.get_by_label("When").select_option("refundFraction")
    protect.get_by_label("Compares").select_option("gte")
    protect.get_by_label("Value").fill("150")
    protect.get_by_role("button", name="Add rule").click()
    expect(page.locator("#protect .flash-error")).to_contain_text("from 0 to 100")
    page.locator("#protect").get_by_label("Value").fill("50")
    page.locator("#protect").get_by_label("Name (optional)").fill("half-or-more")
    page.locator("#protect").get_by_role("button", name="Add rule").click()
    expect(page.locator("#rule-half-or-more")).to_contain_text("Hold for approval")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.screenshot(path=screenshot_dir / "rules-editor.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=screenshot_dir / "rules-editor-phone.png", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.set_viewport_size({"width": 1440, "height": 900})

    expect(page.locator("#versions")).to_contain_text("Rule “Half or more” (half-or-more) added")
