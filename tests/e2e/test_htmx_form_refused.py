"""A form htmx sends that Django refuses to read (over ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413;
over ``DATA_UPLOAD_MAX_NUMBER_FIELDS``: 400) shows its page in place of the form, as the 422,
403 and 409 answers do: what was refused, that nothing was changed, and the way back.

Seen: sill.js swapped in only 422, 403 and 409, so the click did nothing visible: no page, no
error, the form as it was."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_SITE_ID, load_demo
from sill.accounts.models import MemberInvite
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def open_members(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/members/")
    expect(page.get_by_role("heading", name="Members", exact=True)).to_be_visible()


def send_invite(page: Page) -> None:
    form = page.locator("form.member-add-form")
    form.get_by_label("Email").fill("barista@northwind-coffee.example")
    form.get_by_role("button", name="Send invite").click()


def assert_refused_in_place(page: Page, *, code: str, title: str) -> None:
    refused = page.locator("section.error-page")
    expect(refused).to_be_visible()
    expect(refused.locator(".error-code")).to_have_text(code)
    expect(refused.get_by_role("heading", level=1)).to_have_text(title)
    expect(refused).to_contain_text("nothing was changed")
    expect(page.locator("form.member-add-form")).to_have_count(0)  # in the form's place
    expect(page.get_by_role("heading", name="Members", exact=True)).to_be_visible()  # the page
    assert not MemberInvite.objects.filter(site_id=DEMO_SITE_ID).exists()


def test_a_form_too_large_shows_the_413_page_in_its_place(page: Page, live_server, settings):
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    open_members(page, live_server.url)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64  # the invite form sends more

    send_invite(page)

    assert_refused_in_place(
        page, code="413 · Form too large", title="That form was too large to send"
    )
    back = page.locator("section.error-page").get_by_role(
        "button", name="Back to the form"
    )  # role=button
    expect(back).to_have_attribute("href", f"{live_server.url}/settings/members/")


def test_a_form_with_too_many_fields_shows_the_400_page_in_its_place(
    page: Page, live_server, settings
):
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    open_members(page, live_server.url)
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 2  # the invite form sends more

    send_invite(page)

    assert_refused_in_place(
        page, code="400 · Too many fields", title="That form had too many fields"
    )
