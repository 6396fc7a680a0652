"""sill.js's confirmation contract: <form data-confirm data-confirm-button> asks in a <dialog>."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from policies.catalog import TEMPLATES
from policies.services import apply_catalog_item
from refunds.demo import load_demo
from tests.e2e.conftest import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_it_asks_before_an_htmx_form_posts_and_sends_confirmed_once(
    page: Page, live_server, screenshot_dir
):
    demo = load_demo()
    owner = get_user_model().objects.get(username="owner@northwind-coffee.example")
    apply_catalog_item(site=demo.site, actor=owner, item=TEMPLATES["large-refund"])
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/rules/")
    rules_before = page.locator("#rules tbody tr").count()
    assert rules_before, "the demo site has rules"
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.post_data or "") if r.method == "POST" else None)
    delete = page.locator("#rules").get_by_role("button", name="Delete").first

    # Escape cancels: nothing is sent, focus returns to the button.
    delete.click()
    dialog = page.get_by_role("dialog", name="Please confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Delete rule")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    page.screenshot(path=screenshot_dir / "confirm-dialog.png")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(delete).to_be_focused()
    # Cancel cancels too.
    delete.click()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert posts == []
    expect(page.locator("#rules tbody tr")).to_have_count(rules_before)

    # Confirm: one htmx POST carrying confirmed=1, and the rules section is swapped.
    delete.click()
    dialog.get_by_role("button", name="Delete rule").click()
    expect(page.locator("#rules tbody tr")).to_have_count(rules_before - 1)
    assert len(posts) == 1
    assert posts[0].count("confirmed=1") == 1


def test_it_labels_the_confirm_button_and_posts_plain_forms(page: Page, live_server):
    load_demo()
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/settings/agents/")
    # A plain (non-htmx) form: its data-confirm-button labels the button; confirm posts the page.
    form = page.locator("form[data-confirm]", has_text="Deactivate").first
    with page.expect_request(lambda r: r.method == "POST") as request:
        form.get_by_role("button", name="Deactivate").click()
        page.get_by_role("dialog").get_by_role("button", name="Deactivate agent").click()
    assert "confirmed=1" in (request.value.post_data or "")
    page.wait_for_load_state()
    expect(page.get_by_role("button", name="Reactivate")).to_be_visible()


def test_it_copies_an_id_and_says_so(page: Page, live_server, browser):
    from django.template import engines

    html = (
        engines["django"]
        .from_string(
            '{% include "_copy_id.html" with value="re_0123456789abcdef" label="Refund id" %}'
        )
        .render({})
    )
    assert "…abcdef" in html and "re_0123456789abcdef" in html
    load_demo()
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    p = context.new_page()
    log_in(p, live_server.url, "owner@northwind-coffee.example")
    p.evaluate(
        "(html) => document.querySelector('main').insertAdjacentHTML('beforeend', html)", html
    )
    # Unhidden by sill.js only on load; a fresh insert stays hidden until a settle, so unhide here.
    p.evaluate("() => document.body.dispatchEvent(new Event('htmx:afterSettle'))")
    button = p.get_by_role("button", name="Copy refund id")
    expect(button).to_be_visible()
    expect(p.locator(".copy-id-short")).to_have_text("…abcdef")
    button.click()
    expect(p.locator("[data-copy-status]")).to_have_text("Copied")
    assert p.evaluate("navigator.clipboard.readText()") == "re_0123456789abcdef"
    context.close()
