"""An owner whose code is older than the sensitive-change window asks for an agent token: the
refusal is a page with a heading, the reason in words and the code field itself; the code takes
them back to Settings → Agents, where the token is issued. The add-key form carries the code
field itself: a wrong code keeps what was typed, the right one adds the key in one submit. Laptop and phone, axe-core, screenshots under
``screenshot_dir()/fresh-code-*.png``."""

from __future__ import annotations

import time
from importlib import import_module

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import Browser, Page, ViewportSize, expect

from refunds.demo import DEMO_PASSWORD, load_demo
from sill.accounts.models import Site
from sill.accounts.two_factor import VERIFIED_AT_KEY, regenerate_recovery_codes
from tests.accounts.test_agents_page import PUBLIC
from tests.accounts.two_factor_helpers import code_for, confirmed_device
from tests.e2e.accessibility import ConsoleErrors, horizontal_overflow, run_axe

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OWNER = "owner@northwind-coffee.example"
LAPTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
CODE_FIELD = "Code from your authenticator app, or a recovery code"


def _next_code(device: TOTPDevice) -> str:
    """A code the device has not seen: each one works once, so the step after its last."""
    device.refresh_from_db()
    return code_for(device, drift=max(0, device.last_t + 1 - int(time.time()) // device.step))


def _code_goes_stale(page: Page) -> None:
    """The session's code was entered an hour ago (older than SILL_TWO_FACTOR_FRESH_SECONDS)."""
    cookie = next(c for c in page.context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME)
    session = import_module(settings.SESSION_ENGINE).SessionStore(cookie["value"])
    session[VERIFIED_AT_KEY] = int(time.time()) - 3600
    session.save()


def _check(page: Page) -> list[str]:
    overflow = horizontal_overflow(page)
    return run_axe(page) + ([overflow] if overflow else [])


def test_a_stale_code_is_asked_for_again_and_leads_back_to_the_agents(
    browser: Browser, live_server, screenshot_dir
):
    load_demo()
    site = Site.objects.get(name="Northwind Coffee")
    site.require_two_factor = True
    site.save(update_fields=["require_two_factor"])
    device = confirmed_device(get_user_model().objects.get(username=OWNER))
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, bypass_csp=True)
    page = context.new_page()
    errors = ConsoleErrors(page)
    page.goto(f"{base}/login/")
    page.get_by_label("Email").fill(OWNER)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_label(CODE_FIELD).fill(_next_code(device))
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
    _code_goes_stale(page)

    page.goto(f"{base}/settings/agents/")
    page.get_by_role("button", name="Issue token").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Enter a fresh code")
    expect(page.get_by_text("This change needs a fresh code")).to_be_visible()
    problems = _check(page)
    page.screenshot(path=screenshot_dir / "fresh-code-refused-laptop.png", full_page=True)
    page.set_viewport_size(PHONE)
    problems += _check(page)
    page.screenshot(path=screenshot_dir / "fresh-code-refused-phone.png", full_page=True)
    page.set_viewport_size(LAPTOP)

    # The code right here, then back where the merchant was, to do it again.
    page.get_by_label(CODE_FIELD).fill(_next_code(device))
    page.get_by_role("button", name="Verify and go back").click()
    expect(page).to_have_url(f"{base}/settings/agents/")
    expect(page.get_by_text("Code accepted")).to_be_visible()
    page.get_by_role("button", name="Issue token").click()
    expect(page.locator("code.token")).to_contain_text("sill_at_")

    problems += errors.take(expected_status=403)

    # The key form asks for the code itself: a wrong one gives the form back as typed, with
    # the error under the code field; the right one adds the key in the same submit.
    _code_goes_stale(page)
    page.goto(f"{base}/settings/agents/")
    form = page.locator("#add-key")
    typed = {"Agent id": "agent_new", "Key id": "key-2026-12", "Public key": PUBLIC}
    for label, value in typed.items():
        form.get_by_label(label).fill(value)
    form.get_by_label("Valid until").fill("2027-06-30T18:00")
    expect(form.get_by_text("A new key needs a code from the last few minutes")).to_be_visible()
    form.get_by_label(CODE_FIELD).fill("000000")
    form.get_by_role("button", name="Add key").click()
    error = form.locator("#add-code-error")
    expect(error).to_contain_text("That code didn't work")
    for label, value in typed.items():
        expect(form.get_by_label(label)).to_have_value(value)
    expect(form.get_by_label("Valid until")).to_have_value("2027-06-30T18:00")
    expect(form.get_by_label(CODE_FIELD)).to_have_attribute("aria-invalid", "true")
    problems += _check(page)
    page.screenshot(path=screenshot_dir / "fresh-code-key-wrong-laptop.png", full_page=True)
    page.set_viewport_size(PHONE)
    problems += _check(page)
    form.screenshot(path=screenshot_dir / "fresh-code-key-wrong-phone.png")
    page.set_viewport_size(LAPTOP)
    problems += errors.take(expected_status=422)

    # A recovery code: a third TOTP code could need a step the clock has not reached yet, and
    # django-otp makes the authenticator wait a moment after the wrong one.
    form.get_by_label(CODE_FIELD).fill(regenerate_recovery_codes(device.user)[0])
    form.get_by_role("button", name="Add key").click()
    expect(page.get_by_text("Added key key-2026-12 to agent_new.")).to_be_visible()
    expect(page.locator("#add-key").get_by_label(CODE_FIELD)).to_have_count(0)
    problems += errors.take()
    assert problems == []
    context.close()
