"""An owner adds a member, changes their role and removes them from Settings → Members."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_PASSWORD, DEMO_SITE_ID, load_demo
from sill.accounts.models import Membership, Role

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_owner_manages_members(page: Page, live_server, screenshot_dir):
    load_demo()
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Email").fill("owner@northwind-coffee.example")
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()

    page.get_by_role("link", name="Settings", exact=True).click()
    expect(page.get_by_role("heading", name="Settings", exact=True)).to_be_visible()
    expect(page.get_by_text("northwind-coffee.example").first).to_be_visible()
    page.screenshot(path=screenshot_dir / "settings-index.png", full_page=True)
    page.get_by_role("link", name="Members").click()
    expect(page.get_by_role("heading", name="Members", exact=True)).to_be_visible()

    # A bad email stays in the form with the error (htmx swaps the 422).
    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("not-an-email")
    form.get_by_role("button", name="Add member").click()
    expect(form.locator(".field-error")).to_contain_text("Enter a valid email address")

    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("barista@northwind-coffee.example")
    form.get_by_label("Role").select_option("staff")
    form.get_by_label("Can refund").check()
    form.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "Added barista@northwind-coffee.example as staff."
    )
    member = Membership.objects.get(
        site_id=DEMO_SITE_ID, user__username="barista@northwind-coffee.example"
    )
    assert (member.role, member.can_refund) == (Role.STAFF, True)
    row = page.locator(f"#member-{member.pk}")
    expect(row).to_contain_text("manage.py members add")
    page.screenshot(path=screenshot_dir / "members.png", full_page=True)

    row.get_by_label("Role for barista@northwind-coffee.example").select_option("reviewer")
    row.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "barista@northwind-coffee.example is now reviewer."
    )
    member.refresh_from_db()
    assert (member.role, member.can_refund) == (Role.REVIEWER, False)

    # Removing asks first; dismissing keeps the member.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator(f"#member-{member.pk}").get_by_role("button", name="Remove").click()
    expect(page.locator(f"#member-{member.pk}")).to_be_visible()
    assert Membership.objects.filter(pk=member.pk).exists()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#member-{member.pk}").get_by_role("button", name="Remove").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "Removed barista@northwind-coffee.example from Northwind Coffee."
    )
    expect(page.locator(f"#member-{member.pk}")).to_have_count(0)
    assert not Membership.objects.filter(pk=member.pk).exists()
