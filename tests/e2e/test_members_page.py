"""An owner invites a member, revokes the invitation, changes a member's role and removes them
from Settings → Members (the confirmations are sill.js's dialog)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_SITE_ID, load_demo
from sill.accounts.models import MemberInvite, Membership, Role
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def confirm(page: Page, button: str) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=button).click()


def test_an_owner_manages_members(page: Page, live_server, screenshot_dir, settings):
    settings.SILL_BASE_URL = live_server.url
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")

    page.get_by_role("link", name="Settings", exact=True).first.click()
    expect(page.get_by_role("heading", name="Settings", exact=True)).to_be_visible()
    page.screenshot(path=screenshot_dir / "settings-index.png", full_page=True)
    page.get_by_role("link", name="Members").first.click()
    expect(page.get_by_role("heading", name="Members", exact=True)).to_be_visible()
    # No page offers a shell command any more.
    expect(page.get_by_text("manage.py")).to_have_count(0)

    # A bad email stays in the form with the error (htmx swaps the 422).
    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("not-an-email")
    form.get_by_role("button", name="Send invite").click()
    expect(form.locator(".field-error")).to_contain_text("Enter a valid email address")

    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("barista@northwind-coffee.example")
    form.get_by_label("Role").select_option("staff")
    form.get_by_label("Can refund").check()
    form.get_by_role("button", name="Send invite").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "Invitation sent to barista@northwind-coffee.example as staff."
    )
    invite = MemberInvite.objects.get(
        site_id=DEMO_SITE_ID, email="barista@northwind-coffee.example"
    )
    assert (invite.role, invite.can_refund) == (Role.STAFF, True)
    row = page.locator(f"#invite-{invite.pk}")
    expect(row).to_contain_text("Pending")
    page.screenshot(path=screenshot_dir / "members.png", full_page=True)

    # Revoking asks first; cancelling keeps the invitation.
    row.get_by_role("button", name="Revoke").click()
    confirm(page, "Cancel")
    expect(row).to_be_visible()
    invite.refresh_from_db()
    assert invite.pending
    row.get_by_role("button", name="Revoke").click()
    confirm(page, "Revoke invitation")
    expect(page.get_by_role("status").first).to_contain_text(
        "The invitation for barista@northwind-coffee.example was revoked"
    )
    expect(page.locator(f"#invite-{invite.pk}")).to_have_count(0)

    member = Membership.objects.get(
        site_id=DEMO_SITE_ID, user__username="staff@northwind-coffee.example"
    )
    row = page.locator(f"#member-{member.pk}")
    row.get_by_label("Role for staff@northwind-coffee.example").select_option("reviewer")
    row.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "staff@northwind-coffee.example is now reviewer."
    )
    member.refresh_from_db()
    assert (member.role, member.can_refund) == (Role.REVIEWER, False)

    page.locator(f"#member-{member.pk}").get_by_role("button", name="Remove").click()
    confirm(page, "Cancel")
    expect(page.locator(f"#member-{member.pk}")).to_be_visible()
    assert Membership.objects.filter(pk=member.pk).exists()
    page.locator(f"#member-{member.pk}").get_by_role("button", name="Remove").click()
    confirm(page, "Remove member")
    expect(page.get_by_role("status").first).to_contain_text(
        "Removed staff@northwind-coffee.example from Northwind Coffee."
    )
    expect(page.locator(f"#member-{member.pk}")).to_have_count(0)
    assert not Membership.objects.filter(pk=member.pk).exists()
