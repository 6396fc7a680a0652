"""What a merchant sees of the demo agent's purchases: the order page of one charged (its
decision and the evidence download), the order page of one refused because its rail was off,
Activity with both decisions, and the 503 page that cannot tell whether a change was saved.
Each at a laptop (1280) and a phone (390) width: screenshot under
``screenshot_dir()/purchases/``, no sideways scroll on the phone, nothing cut off, axe-core,
no console error, and no code or raw id where the merchant reads words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_AGENT_ID, DEMO_DOMAIN, load_demo
from sill.accounts.models import Agent
from sill.orders.models import ChargeStatus, Order, OrderStatus
from sill.rails.models import RailAccount
from tests.e2e.accessibility import ConsoleErrors, clipped_content, horizontal_overflow, run_axe
from tests.e2e.conftest import log_in
from tests.e2e.test_merchant_tour import OWNER, SHOWN_CODES, VIEWPORTS, box
from tests.refunds.conftest import post, purchase_intent, register_key, signed_body

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _purchase(site_id: str, agent: Agent) -> Order:
    """The demo agent's purchase on the mock rail, answered (and charged) as the API would."""
    body = signed_body(
        purchase_intent(merchant=DEMO_DOMAIN), site_id=site_id, agent_id=agent.agent_id
    )
    answer = post(Client(), body).json()
    assert "order_id" in answer, answer
    return Order.objects.get(pk=answer["order_id"])


@pytest.fixture
def purchases() -> dict[str, Order]:
    site = load_demo().site
    agent = Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID)
    register_key(agent)
    charged = _purchase(site.pk, agent)
    assert charged.charges.get().status == ChargeStatus.SUCCEEDED
    RailAccount.objects.filter(site=site, rail="mock").update(enabled=False)
    refused = _purchase(site.pk, agent)
    assert refused.status == OrderStatus.CANCELLED and not refused.charges.exists()
    RailAccount.objects.filter(site=site, rail="mock").update(enabled=True)
    return {"charged": charged, "refused": refused}


def noticed(page: Page, slug: str, orders: dict[str, Order]) -> list[str]:
    """What a merchant noticed on the page now showing, one line each."""
    text = page.locator("main").inner_text()
    found = [f"shows the code {code}" for code in sorted(set(SHOWN_CODES.findall(text)))]
    found += [f"shows the order's id {o.pk}" for o in orders.values() if o.pk in text]
    if slug.startswith("order-"):
        # Seen: the download's explanation began beside its button and wrapped under it.
        button = box(page.get_by_role("button", name="Download the purchase's evidence (JSON)"))
        note = box(page.get_by_text("the standalone verifier checks it without Sill"))
        if note["y"] < button["y"] + button["height"]:
            found.append("the evidence download's explanation is beside its button, not under it")
    return found


def look(page: Page, shots: Path, slug: str, viewport: str, orders: dict[str, Order]) -> list[str]:
    page.screenshot(path=shots / f"{slug}-{viewport}.png", full_page=True)
    found = clipped_content(page) + run_axe(page) + noticed(page, slug, orders)
    if viewport == "phone" and (overflow := horizontal_overflow(page)):
        found.append(overflow)
    return [f"{viewport} {slug}: {line}" for line in found]


def test_a_merchant_reads_the_agents_purchases(
    browser: Browser, live_server: Any, screenshot_dir: Path, purchases: dict[str, Order]
) -> None:
    shots = screenshot_dir / "purchases"
    shots.mkdir(exist_ok=True)
    charged, refused = purchases["charged"], purchases["refused"]
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        errors = ConsoleErrors(page)
        log_in(page, live_server.url, OWNER)

        page.goto(f"{live_server.url}/orders/{charged.pk}/")
        expect(page.locator("#purchase-evidence")).to_be_visible()
        problems += look(page, shots, "order-charged", viewport, purchases)

        page.goto(f"{live_server.url}/orders/{refused.pk}/")
        expect(page.locator("#purchase-refusal")).to_contain_text("Purchase refused")
        problems += look(page, shots, "order-refused", viewport, purchases)

        page.goto(f"{live_server.url}/activity/")
        expect(page.locator("main")).to_contain_text("Purchase approved, to be charged on")
        problems += look(page, shots, "activity", viewport, purchases)

        # The 503 page as sill.error_pages renders it when the database was lost at commit,
        # written into a page of the live server so its stylesheet loads.
        page.set_content(render_to_string("503.html", {"outcome_unknown": True, "back": "/"}))
        expect(page.get_by_text("it may or may not have been saved")).to_be_visible()
        problems += look(page, shots, "unavailable-unknown", viewport, purchases)

        problems += [f"{viewport}: {line}" for line in errors.take()]
        context.close()
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
