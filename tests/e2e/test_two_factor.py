"""An owner sets up an authenticator in Chromium (under the CSP: the QR code is a data: image),
keeps the recovery codes, logs out, and logs in again with the password and then a code; a
site requiring two factors refuses an unverified change with words and a link."""

from __future__ import annotations

import base64
import time

import pytest
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import ConsoleMessage, Page, expect

from refunds.demo import DEMO_PASSWORD, load_demo

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OWNER = "owner@northwind-coffee.example"


def _code(secret: str, *, drift: int = 0) -> str:
    text = secret.replace(" ", "")
    key = base64.b32decode(text + "=" * (-len(text) % 8))
    return f"{totp(key, drift=drift):06d}"


def test_an_owner_enrols_and_logs_in_with_a_code(page: Page, live_server, screenshot_dir):
    load_demo()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            problems.append(message.text)

    page.on("console", on_console)
    base = live_server.url
    page.goto(f"{base}/login/")
    page.get_by_label("Email").fill(OWNER)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()

    page.goto(f"{base}/settings/account/")
    page.get_by_role("button", name="Set up an authenticator").click()
    qr = page.get_by_role("img", name="QR code of your authenticator secret")
    expect(qr).to_be_visible()
    assert qr.evaluate("img => img.naturalWidth") > 0
    secret = page.locator("#totp-secret").inner_text()
    page.screenshot(path=screenshot_dir / "two-factor-setup.png", full_page=True)
    page.get_by_label("6-digit code").fill(_code(secret))
    page.get_by_label("Your password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Your recovery codes")).to_be_visible()
    assert page.locator("#recovery-codes li").count() == 10
    page.get_by_role("button", name="I have saved them").click()
    expect(page.get_by_text("This session is verified")).to_be_visible()

    page.context.clear_cookies()
    page.goto(f"{base}/login/")
    page.get_by_label("Email").fill(OWNER)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Enter your code")).to_be_visible()
    # The confirming code's time step is spent: the one after it. Counted from the step the
    # device recorded, not from the clock: a confirmation that crossed a 30-second boundary
    # leaves the device a step behind (drift -1), and "now + 1" was then out of its window.
    device = TOTPDevice.objects.get(user__username=OWNER, confirmed=True)
    next_step = device.last_t + 1 - int(time.time()) // device.step
    page.get_by_label("Code from your authenticator app, or a recovery code").fill(
        _code(secret, drift=next_step)
    )
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
    assert not problems, problems
