"""The authenticator's setup page on a laptop and a phone: a wrong password or code is said
under its own field (not above the QR code, a screen away from the field on a phone), the
fields are a code's and a password's width, and the page passes axe-core with nothing
sticking out. Screenshots: ``screenshot_dir()/two-factor-setup-*.png``."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Locator, expect

from refunds.demo import DEMO_PASSWORD, load_demo
from tests.e2e.accessibility import ConsoleErrors, horizontal_overflow, run_axe
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OWNER = "owner@northwind-coffee.example"
VIEWPORTS = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def _right_under(error: Locator, field: Locator) -> bool:
    """``error`` starts within a line below ``field``'s bottom edge."""
    e, f = error.bounding_box(), field.bounding_box()
    assert e is not None and f is not None
    return 0 <= e["y"] - (f["y"] + f["height"]) <= 24


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_each_error_is_said_under_its_field(
    browser: Browser, live_server, screenshot_dir, viewport
):
    load_demo()
    context = browser.new_context(viewport=VIEWPORTS[viewport], bypass_csp=True)
    page = context.new_page()
    errors = ConsoleErrors(page)
    log_in(page, live_server.url, OWNER)
    page.goto(f"{live_server.url}/settings/account/")
    page.get_by_role("button", name="Set up an authenticator").click()
    code, password = page.get_by_label("6-digit code"), page.get_by_label("Your password")
    expect(password).to_have_attribute("autocomplete", "current-password")
    # A password manager is told whose password this is.
    expect(page.locator('input[autocomplete="username"]')).to_have_value(OWNER)
    if viewport == "laptop":
        box = password.bounding_box()
        assert box is not None and box["width"] <= 480, box  # not the card's whole width
    problems = run_axe(page)

    code.fill("000000")
    password.fill("not the password")
    page.get_by_role("button", name="Confirm").click()
    said = page.locator("#password-error")
    expect(said).to_have_text("That password is wrong. Enter the one you log in with.")
    expect(password).to_have_attribute("aria-describedby", "password-error")
    assert _right_under(said, password)
    expect(code).not_to_have_attribute("aria-invalid", "true")
    page.screenshot(
        path=screenshot_dir / f"two-factor-setup-password-{viewport}.png", full_page=True
    )
    problems += run_axe(page)

    page.get_by_label("6-digit code").fill("000000")
    page.get_by_label("Your password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Confirm").click()
    said = page.locator("#code-error")
    expect(said).to_contain_text("That code didn't work.")
    assert _right_under(said, page.get_by_label("6-digit code"))
    expect(page.locator("#password-error")).to_have_count(0)
    page.screenshot(path=screenshot_dir / f"two-factor-setup-code-{viewport}.png", full_page=True)
    problems += run_axe(page)

    overflow = horizontal_overflow(page)
    problems += [overflow] if overflow else []
    problems += errors.take(expected_status=422)
    assert problems == []
    context.close()
