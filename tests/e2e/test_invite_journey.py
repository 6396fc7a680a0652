"""The journey of a new colleague: an owner invites them from Settings → Members, the email
arrives (locmem; the live server runs in this process), they open the link in a browser of
their own, choose a password, log in and see the dashboard. Screenshots at 1440x900 and
390x844 of the members page with the pending invitation and of the set-password page."""

from __future__ import annotations

import re
import uuid

import pytest
from django.core import mail
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_SITE_ID, load_demo
from sill.accounts.models import Membership, Role
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
PASSWORD = "a-fresh-barista-passphrase"


def no_horizontal_overflow(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    viewport = page.evaluate("window.innerWidth")
    assert width <= viewport, f"{page.url} is {width}px wide in a {viewport}px viewport"


def shoot(page: Page, path, name: str) -> None:
    for size, (w, h) in SIZES.items():
        page.set_viewport_size({"width": w, "height": h})
        if size == "phone":
            no_horizontal_overflow(page)
        page.screenshot(path=path / f"{name}-{size}.png", full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})


def test_invite_set_password_log_in(
    page: Page, browser: Browser, live_server, screenshot_dir, settings
):
    settings.SILL_BASE_URL = live_server.url
    load_demo()
    mail.outbox.clear()
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/settings/members/")

    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("newhire@northwind-coffee.example")
    form.get_by_label("Role").select_option("staff")
    form.get_by_label("Can refund").check()
    form.get_by_role("button", name="Send invite").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "Invitation sent to newhire@northwind-coffee.example as staff."
    )
    expect(page.locator("#invite-list")).to_contain_text("newhire@northwind-coffee.example")
    shoot(page, screenshot_dir, "members-pending-invite")

    (sent,) = mail.outbox
    assert sent.to == ["newhire@northwind-coffee.example"]
    (link,) = re.findall(r"http://\S+/invite/\S+/", sent.body)
    assert link.startswith(live_server.url)

    # The invitee, in a browser of their own.
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    invitee = context.new_page()
    invitee.goto(link)
    expect(invitee.get_by_role("heading", name="Join Northwind Coffee")).to_be_visible()
    expect(invitee.get_by_text("owner@northwind-coffee.example invited")).to_be_visible()
    shoot(invitee, screenshot_dir, "invite-set-password")

    invitee.get_by_label("New password", exact=True).fill("short")
    invitee.get_by_label("New password confirmation").fill("short")
    invitee.get_by_role("button", name="Set password and join").click()
    expect(invitee.get_by_text("This password is too short.")).to_be_visible()

    invitee.get_by_label("New password", exact=True).fill(PASSWORD)
    invitee.get_by_label("New password confirmation").fill(PASSWORD)
    invitee.get_by_role("button", name="Set password and join").click()
    expect(invitee.get_by_text("Your password is set")).to_be_visible()

    invitee.get_by_label("Email").fill("newhire@northwind-coffee.example")
    invitee.get_by_label("Password").fill(PASSWORD)
    invitee.get_by_role("button", name="Log in").click()
    expect(invitee.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
    member = Membership.objects.get(
        site_id=DEMO_SITE_ID, user__username="newhire@northwind-coffee.example"
    )
    assert (member.role, member.can_refund) == (Role.STAFF, True)

    # The link worked once.
    invitee.goto(link)
    expect(invitee.get_by_role("heading", name="This invitation was already used")).to_be_visible()
    context.close()

    # The owner's list no longer shows the invitation, but the member.
    page.goto(f"{live_server.url}/settings/members/")
    expect(page.locator("#invite-list")).to_have_count(0)
    expect(page.locator(f"#member-{member.pk}")).to_contain_text("newhire@northwind-coffee.example")


def test_forgot_password_from_the_login_page(page: Page, live_server, screenshot_dir, settings):
    settings.SILL_BASE_URL = live_server.url
    # Rate-limit counters of this test only (the live server runs in this process).
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
        for name, config in settings.CACHES.items()
    }
    load_demo()
    mail.outbox.clear()
    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Forgot password?").click()
    expect(page.get_by_role("heading", name="Reset your password")).to_be_visible()
    page.get_by_label("Email").fill("staff@northwind-coffee.example")
    page.get_by_role("button", name="Email me a link").click()
    expect(page.get_by_role("heading", name="Check your email")).to_be_visible()

    (sent,) = mail.outbox
    (link,) = re.findall(r"http://\S+/password/reset/\S+/\S+/", sent.body)
    page.goto(link)
    expect(page.get_by_role("heading", name="Choose a new password")).to_be_visible()
    shoot(page, screenshot_dir, "password-reset-set")
    page.get_by_label("New password", exact=True).fill(PASSWORD)
    page.get_by_label("New password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Set new password").click()
    expect(page.get_by_role("heading", name="Your password is changed")).to_be_visible()
    page.get_by_role("button", name="Log in").click()
    page.get_by_label("Email").fill("staff@northwind-coffee.example")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
