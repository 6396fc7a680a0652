"""A form htmx sends that Django refuses to read (over ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413;
over ``DATA_UPLOAD_MAX_NUMBER_FIELDS``: 400) shows its page in place of the form, as the 422,
403 and 409 answers do: what was refused, that nothing was changed, and the way back.

Seen: sill.js swapped in only 422, 403 and 409, so the click did nothing visible: no page, no
error, the form as it was."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_SITE_ID, load_demo
from sill.accounts.models import MemberInvite
from tests.e2e.accessibility import clipped_content, horizontal_overflow, run_axe
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
    # A section of the Members page (its h1), taking the focus from the button that went away.
    expect(refused.get_by_role("heading", level=2)).to_have_text(title)
    expect(refused.get_by_role("heading", level=2)).to_be_focused()
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


# --- how it looks: in the form's place (htmx) and as a page (without JavaScript) -------------

VIEWPORTS = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def _problems(page: Page, *, label: str, phone: bool) -> list[str]:
    found = clipped_content(page) + run_axe(page)
    if phone and (overflow := horizontal_overflow(page)):
        found.append(overflow)
    return [f"{label}: {line}" for line in found]


@pytest.mark.parametrize("htmx", [True, False], ids=["in-place", "full-page"])
def test_the_refusal_reads_well_on_a_laptop_and_a_phone(
    htmx, browser: Browser, live_server, settings, screenshot_dir
):
    """Screenshots under screenshot_dir()/form-refused/; axe-core and the phone's width on
    each. The full page is what a browser without JavaScript gets: the form posted as is
    (``form.submit()`` fires no submit event, so htmx does not take it)."""
    load_demo()
    shots = screenshot_dir / "form-refused"
    shots.mkdir(exist_ok=True)
    how = "in-place" if htmx else "full-page"
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
        log_in(page, live_server.url, "owner@northwind-coffee.example")
        open_members(page, live_server.url)
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64
        if htmx:
            send_invite(page)
        else:
            form = page.locator("form.member-add-form")
            form.get_by_label("Email").fill("barista@northwind-coffee.example")
            form.evaluate("(form) => form.submit()")
        refused = page.locator("section.error-page")
        expect(refused).to_contain_text("nothing was changed")
        if htmx:
            expect(page.get_by_role("heading", name="Members", exact=True)).to_be_visible()
        else:
            expect(page).to_have_title(re.compile("That form was too large to send"))
        refused.scroll_into_view_if_needed()
        page.screenshot(path=shots / f"form-refused-{how}-{viewport}.png", full_page=True)
        problems += _problems(page, label=f"{how} {viewport}", phone=viewport == "phone")
        context.close()
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
