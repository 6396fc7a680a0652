from __future__ import annotations

import pytest
from nacl.signing import SigningKey
from playwright.sync_api import Page, expect

from refunds.demo import DEMO_PASSWORD, load_demo
from sill.accounts.services import b64url_encode

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
KEY = "sk_test_51E2eKeyAbCdEfGhIjKlMnOpQrStUvWx0123456789wxyz"


def test_it_configures_rails_and_manages_agent_keys(page: Page, live_server, screenshot_dir):
    load_demo()
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Email").fill("owner@northwind-coffee.example")
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()

    # Rails: a bad key is refused in the card (htmx 422), a good one saved write-only.
    page.goto(f"{live_server.url}/settings/rails/")
    stripe = page.locator("#rail-stripe")
    stripe.get_by_label("Secret key").fill("pk_test_nope12345678")
    stripe.get_by_role("button", name="Save Stripe settings").click()
    expect(page.locator("#rail-stripe")).to_contain_text("not a Stripe secret key")
    page.screenshot(path=screenshot_dir / "settings-rails-error.png", full_page=True)
    page.locator("#rail-stripe").get_by_label("Secret key").fill(KEY)
    page.locator("#rail-stripe").get_by_role("button", name="Save Stripe settings").click()
    expect(page.locator("#rail-stripe")).to_contain_text("Key saved")
    expect(page.locator("#rail-stripe")).to_contain_text("sk_test_…wxyz")
    page.locator("#rail-stripe").get_by_role("button", name="Switch on").click()
    expect(page.locator("#rail-stripe .badge").first).to_have_text("On")
    assert KEY not in page.content()
    page.screenshot(path=screenshot_dir / "settings-rails.png", full_page=True)

    # Agents: add a key, revoke it (confirmed), issue a token.
    page.goto(f"{live_server.url}/settings/agents/")
    expect(page.get_by_role("heading", name="Agents", exact=True)).to_be_visible()
    public = b64url_encode(bytes(SigningKey(bytes(range(32))).verify_key))
    page.get_by_label("Agent id").fill("agent_acme_shopper")
    page.get_by_label("Key id").fill("e2e-rotated")
    page.get_by_label("Public key").fill(public)
    page.get_by_role("button", name="Add key").click()
    expect(page.get_by_text("Added key e2e-rotated to agent_acme_shopper.")).to_be_visible()
    page.screenshot(path=screenshot_dir / "settings-agents.png", full_page=True)
    row = page.locator("tr", has_text="e2e-rotated")
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke key").click()  # sill.js's dialog
    expect(page.locator("tr", has_text="e2e-rotated")).to_contain_text("Revoked")
    page.screenshot(path=screenshot_dir / "settings-agents-revoked.png", full_page=True)
    page.get_by_role("button", name="Issue token").first.click()
    expect(page.get_by_text("shown only once")).to_be_visible()
    expect(page.locator("code.token")).to_contain_text("sill_at_")
    page.screenshot(path=screenshot_dir / "settings-agents-token.png", full_page=True)
