"""The order page when the charge's rail refuses every refund: a Stripe rail whose stored key
cannot be read, a rail switched off, a live-mode rail where live money is off. Owners see it in
the Refund panel with a link to Settings → Rails; reviewers see it on the charge card. Each
state at a laptop (1280) and a phone (390) width: screenshot, no sideways scroll, axe-core."""

from __future__ import annotations

import pytest
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_ORDER_MANDATE, DEMO_PASSWORD, load_demo
from sill.orders.models import Charge, Order
from sill.rails.models import RailAccount, RailMode
from tests.e2e.accessibility import ConsoleErrors, clipped_content, horizontal_overflow, run_axe

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
KEY = "sk_test_51UnreadableDecisionKey00000000XYZ9"
LOST = "the-secret-key-that-was-rotated-away-" + "l" * 40


def stripe_order() -> Order:
    """The demo order, its charge taken on Stripe (the site's Stripe rail set by each test)."""
    demo = load_demo()
    order = Order.objects.get(site=demo.site, source_mandate_id=DEMO_ORDER_MANDATE)
    Charge.objects.filter(order=order).update(rail="stripe")
    return order


def unreadable_key(order: Order) -> None:
    account = RailAccount(site_id=order.site_id, rail="stripe", enabled=True)
    with override_settings(SECRET_KEY=LOST, SECRET_KEY_FALLBACKS=[]):
        account.set_secret(KEY)
    account.save()


def switched_off(order: Order) -> None:
    RailAccount.objects.create(site_id=order.site_id, rail="stripe", enabled=False)


def live_money_off(order: Order) -> None:
    account = RailAccount(site_id=order.site_id, rail="stripe", enabled=True, mode=RailMode.LIVE)
    account.set_secret(KEY.replace("sk_test_", "sk_live_"))
    account.save()


STATES = {
    "unreadable-key": unreadable_key,
    "switched-off": switched_off,
    "live-off": live_money_off,
}
ROLES = {"owner": "owner@northwind-coffee.example", "reviewer": "reviewer@northwind-coffee.example"}


def look(browser: Browser, base: str, order: Order, *, role: str, state: str, shots) -> list[str]:
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        errors = ConsoleErrors(page)
        page.goto(f"{base}/login/")
        page.get_by_label("Email").fill(ROLES[role])
        page.get_by_label("Password").fill(DEMO_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Northwind Coffee")).to_be_visible()
        errors.take()
        page.goto(f"{base}/orders/{order.pk}/")
        expect(page.get_by_role("heading", name="Order #1001")).to_be_visible()
        assert_the_refusal_is_said_once(page, role=role)
        page.screenshot(
            path=shots / f"order-rail-refused-{state}-{role}-{viewport}.png", full_page=True
        )
        label = f"{role} {viewport} {state}"
        if viewport == "phone" and (overflow := horizontal_overflow(page)):
            problems.append(f"{label}: {overflow}")
        problems += [f"{label}: {line}" for line in clipped_content(page) + run_axe(page)]
        problems += [f"{label}: {line}" for line in errors.take()]
        context.close()
    return problems


def assert_the_refusal_is_said_once(page: Page, *, role: str) -> None:
    expect(page.get_by_text("Refunds on Stripe are refused.")).to_have_count(1)
    # Settings, not the server's environment, first: a merchant's way to fix it.
    for words in ("set SILL_ALLOW_LIVE", "add the old one to SILL_SECRET_KEY_FALLBACKS."):
        expect(page.get_by_text(words)).to_have_count(0)
    if role == "owner":
        panel = page.locator("#refund-panel")
        expect(panel).to_contain_text("Refunds on Stripe are refused.")
        expect(panel.get_by_role("button", name="Open rail settings")).to_have_attribute(
            "href", "/settings/rails/"
        )
        expect(panel.get_by_role("button", name="Refund")).to_have_count(0)
    else:
        card = page.locator("article.charge")
        expect(card).to_contain_text("Refunds on Stripe are refused.")
        expect(card.get_by_role("button", name="Open rail settings")).to_have_count(0)
        expect(card).to_contain_text("An owner or admin can fix it on Settings → Rails.")


@pytest.fixture
def shots(screenshot_dir):
    path = screenshot_dir / "rail-refused"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("role", list(ROLES))
def test_the_order_page_says_the_rail_refuses_refunds(role, state, browser, live_server, shots):
    order = stripe_order()
    STATES[state](order)
    problems = look(browser, live_server.url, order, role=role, state=state, shots=shots)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
