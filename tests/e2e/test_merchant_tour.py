"""A merchant's tour: the owner of a site with realistic data walks its pages on a laptop
(1280 x 800) and a phone (390 x 844).

The data is the demo's, plus every state a merchant meets: a refund held for review, one
approved after its hold, one that expired, one the rail declined, one that needs attention,
a Stripe key whose account is not the one two orders were paid on (the rails card lists them
as left behind), an admin's Slack link Slack has not confirmed, a chain check that could not
start ("Not verified"), and an open reconciliation difference.

Each page gets a screenshot under ``screenshot_dir()/merchant/<page>-<viewport>.png`` and the
sweep's checks (no sideways scroll, on the laptop too; nothing cut off; axe-core; no console
error), plus what a merchant noticed on this tour: no error codes or enum values in place of words,
chart text large enough to read on a phone, short button labels on one line, the order's
total row on one line, agents named by their names, and a confirmation before money moves.
Every problem is collected and reported together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, FloatRect, Locator, Page, ViewportSize, expect

from audit.models import CHECK_NOT_STARTED, AuditKind, AuditVerification
from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, load_demo
from refunds.execution import RetryLater, execute_refund
from refunds.labels import OUTCOME_LABELS
from refunds.models import Refund, RefundReason, RefundStatus
from refunds.reconcile.differences import Difference
from refunds.reconcile.inbox import open_item
from refunds.review.decisions import approve_refund, expire_held_refunds
from refunds.staff.services import create_staff_refund
from sill.accounts.models import Agent, Membership, Site
from sill.money import Money
from sill.orders.models import Charge, ChargeStatus, Order, OrderStatus
from sill.orders.services import NewLine, create_order
from sill.rails.models import RailAccount
from tests.e2e.accessibility import ConsoleErrors, clipped_content, horizontal_overflow, run_axe
from tests.e2e.conftest import log_in
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS: dict[str, ViewportSize] = {
    "laptop": {"width": 1280, "height": 800},
    "phone": {"width": 390, "height": 844},
}
OWNER = "owner@northwind-coffee.example"
AGENT_NAME = "Acme Shopper (demo agent)"
EARLIER_STRIPE = "acct_1EarlierNorthwind (test mode)"
NOW_STRIPE = "acct_1NowNorthwind (test mode)"

# Codes and enum values that have words: a page showing one shows a code instead of words.
CODES = sorted(
    {code for code in OUTCOME_LABELS if "_" in code}
    | {value for value in RefundStatus.values if "_" in value}
    | {value for value in AuditKind.values if "_" in value}
)
SHOWN_CODES = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, CODES)) + r")(?![\w-])")

# Text drawn smaller than this many CSS pixels (an SVG's text as scaled to its box).
SMALLEST_TEXT_PX = 10
SMALL_TEXT = """
(limit) => {
  const found = [];
  for (const svg of document.querySelectorAll("main svg")) {
    const scale = svg.getBoundingClientRect().width / (svg.viewBox.baseVal.width || 1);
    for (const text of svg.querySelectorAll("text")) {
      const px = parseFloat(getComputedStyle(text).fontSize) * scale;
      if (px < limit) found.push(`"${text.textContent.trim()}" is ${px.toFixed(1)} px`);
    }
  }
  return found.slice(0, 5);
}
"""

# Buttons of one or two words whose label breaks onto a second line ("Switch / on").
WRAPPED_BUTTONS = """
() => Array.from(document.querySelectorAll("main button, main [role=button]"))
  .filter((b) => b.offsetParent !== null && b.textContent.trim().split(/\\s+/).length <= 2)
  .filter((b) => {
    const range = document.createRange();
    range.selectNodeContents(b);
    const tops = new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top)));
    return tops.size > 1;
  })
  .map((b) => `"${b.textContent.trim()}"`)
"""


@dataclass(frozen=True)
class Tour:
    site: Site
    held: Refund
    expired: Refund
    failed: Refund
    attention: Refund
    order_with_refunds: Order


def _order(site: Site, number: str, *, rail: str, payment_account: str = "") -> Order:
    """A paid $24.00 order of ``site`` taken on ``rail`` (on ``payment_account``)."""
    order = create_order(
        site=site, number=number, buyer_name="Mary Somerville",
        buyer_email="mary@example.co.uk", currency="USD",
        lines=[NewLine(sku="NW-HB-1KG", name="House Blend Coffee, 1 kg", quantity=1,
                       unit_price=Money(2400, "USD"))],
    )  # fmt: skip
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.PAID)
    Charge.objects.create(
        order=order, rail=rail, provider_payment_id=f"pi_{number}", provider_charge_id=f"ch_{number}",
        amount_minor=order.total_minor, currency="USD", captured_at=timezone.now(),
        status=ChargeStatus.SUCCEEDED, payment_account=payment_account,
    )  # fmt: skip
    return Order.objects.get(pk=order.pk)


def _staff_refund(site: Site, order: Order, *, queued: bool = False) -> Refund:
    """A full staff refund of ``order``; executed on commit, or only queued (to the purged
    broker) when ``queued``, for the caller to run its attempts as a worker would."""
    from sill.celery import app

    staff = Membership.objects.get(site=site, role="staff").user
    leaf = RefundReason.objects.filter(site=site, active=True, numchild=0).first()
    assert leaf is not None
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = not queued
    try:
        if queued:
            app.control.purge()
        refund = create_staff_refund(site=site, order=order, actor=staff, kind="full", reason=leaf)
    finally:
        app.conf.task_always_eager = eager
    return Refund.objects.get(pk=refund.pk)


@pytest.fixture
def tour() -> Tour:
    site = Site.objects.get(pk=load_demo().site.pk)
    agent = Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID)
    admin = Membership.objects.get(site=site, role="admin").user
    now = timezone.now()

    held = hold_refund(
        order=Order.objects.get(site=site, source_mandate_id=DEMO_ORDER_MANDATE), agent=agent
    )
    expired = hold_refund(
        order=Order.objects.get(site=site, number="1004"), agent=agent,
        held_at=now - timedelta(days=2),
    )  # fmt: skip
    assert expire_held_refunds(now=now) == 1
    # Held three hours, then approved by the admin and refunded on the mock rail.
    approved = hold_refund(
        order=_order(site, "1011", rail="mock"), agent=agent, held_at=now - timedelta(hours=3)
    )
    approve_refund(refund=approved, actor=admin)
    assert Refund.objects.get(pk=approved.pk).status == RefundStatus.SUCCEEDED

    rail = RailAccount.objects.get(site=site, rail="mock")
    rail.config = {"refund": "decline"}
    rail.save()
    failed = _staff_refund(site, Order.objects.get(site=site, number="1007"))
    assert failed.status == RefundStatus.FAILED
    # An answer lost, then the rail switched off: only a person can settle it.
    rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    rail.save()
    attention = _staff_refund(site, _order(site, "1008", rail="mock"), queued=True)
    with pytest.raises(RetryLater):
        execute_refund(attention.id)
    rail.enabled = False
    rail.save()
    assert execute_refund(attention.id) == "needs_attention"
    rail.config, rail.enabled = {}, True
    rail.save()

    # Stripe: the key acts on another account than the one two orders were paid on.
    stripe = RailAccount(site=site, rail="stripe", payment_account=NOW_STRIPE)
    stripe.set_secret("sk_test_51NorthwindNowKey000000000000")
    stripe.save()
    paid_earlier = _order(site, "1009", rail="stripe", payment_account=EARLIER_STRIPE)
    _order(site, "1010", rail="stripe", payment_account=EARLIER_STRIPE)
    open_item(
        charge=paid_earlier.charges.get(),
        difference=Difference(
            kind="amount_differs", subject="re_1NorthwindOutside", currency="USD",
            provider_refund_id="re_1NorthwindOutside", sill_amount_minor=1000,
            rail_amount_minor=900, rail_currency="USD", sill_status="succeeded",
            rail_status="succeeded", detail="Sill settled $10.00; Stripe refunded $9.00.",
        ),
    )  # fmt: skip

    # Slack: the admin's link was made before Sill asked Slack.
    Membership.objects.filter(site=site, role="admin").update(
        slack_user_id="U0NWADMIN", slack_checked_at=None
    )
    # Activity: a chain check that could not be started.
    AuditVerification.objects.create(
        site=site, status=AuditVerification.Status.FAILED, problem=CHECK_NOT_STARTED,
        started_at=now - timedelta(minutes=5), finished_at=now - timedelta(minutes=5),
        requested_by=OWNER,
    )  # fmt: skip
    return Tour(
        site=site,
        held=Refund.objects.get(pk=held.pk),
        expired=Refund.objects.get(pk=expired.pk),
        failed=Refund.objects.get(pk=failed.pk),
        attention=Refund.objects.get(pk=attention.pk),
        order_with_refunds=Order.objects.get(site=site, number="1002"),
    )


def stops(tour: Tour) -> list[tuple[str, str]]:
    return [
        ("dashboard", "/"),
        ("orders", "/orders/"),
        ("order", f"/orders/{tour.order_with_refunds.pk}/"),
        ("order-transactions", f"/orders/{tour.order_with_refunds.pk}/?tab=transactions"),
        ("order-failed", f"/orders/{tour.failed.order_id}/"),
        ("order-attention", f"/orders/{tour.attention.order_id}/"),
        ("refund-attention", f"/refunds/{tour.attention.pk}/"),
        ("refunds", "/refunds/"),
        ("held", "/held/"),
        ("held-detail", f"/held/{tour.held.pk}/"),
        ("expired", f"/refunds/{tour.expired.pk}/"),
        ("activity", "/activity/"),
        ("rails", "/settings/rails/"),
        ("slack", "/settings/slack/"),
        ("members", "/settings/members/"),
        ("reconcile", "/reconcile/"),
    ]


def box(locator: Locator) -> FloatRect:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not shown"
    return found


def outcome_count(page: Page, outcome: str) -> str:
    """The dashboard's "What the rules decided" table: the count of ``outcome``."""
    row = page.locator("#outcomes-svg-title").locator("xpath=ancestor::section[1]")
    cells = row.locator("tbody tr", has_text=outcome).locator("td")
    return cells.nth(1).text_content() or ""


def noticed(page: Page, slug: str, *, phone: bool) -> list[str]:
    """What a merchant noticed on the page now showing, one line each."""
    found = []
    text = page.locator("main").inner_text()
    found += [f"shows the code {code}" for code in sorted(set(SHOWN_CODES.findall(text)))]
    found += [f"text too small to read: {t}" for t in page.evaluate(SMALL_TEXT, SMALLEST_TEXT_PX)]
    found += [f"button label wraps: {b}" for b in page.evaluate(WRAPPED_BUTTONS)]
    if slug in ("held", "held-detail", "expired") and AGENT_NAME not in text:
        found.append(f"the agent is not named ({AGENT_NAME})")
    if slug == "dashboard":
        for outcome, count in (("Held for review", "3"), ("Rejected by the rules", "0")):
            if (shown := outcome_count(page, outcome)) != count:
                found.append(f'"What the rules decided": {outcome} {shown}, expected {count}')
        if "1 decision" not in text:
            found.append('"Approval time" does not count the approval after a hold')
    if slug == "order" and phone:
        label, total = (box(cell) for cell in page.locator("#order-tab tfoot th").all())
        if abs(label["y"] - total["y"]) > 4:
            found.append("the items' total is not on the line of its label")
        total_box, main = box(page.locator(".page-head .total-box")), box(page.locator("main"))
        if main["x"] + main["width"] - (total_box["x"] + total_box["width"]) > 24:
            found.append("the order's total is not at the right, under its label")
    if slug == "order-attention":
        listed = box(page.locator(".attention-item dl.kv").first)
        toggle = box(page.locator(".attention-item summary").first)
        if toggle["y"] - (listed["y"] + listed["height"]) < 8:
            found.append("the attention card's form toggle touches the list above it")
    return found


def test_a_merchant_tours_the_site_on_a_laptop_and_a_phone(
    browser: Browser, live_server: Any, screenshot_dir: Path, tour: Tour
) -> None:
    shots = screenshot_dir / "merchant"
    shots.mkdir(exist_ok=True)
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        phone = viewport == "phone"
        # bypass_csp: axe-core is injected as a script (tests/e2e/accessibility.py).
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        errors = ConsoleErrors(page)
        log_in(page, live_server.url, OWNER)
        for slug, path in stops(tour):
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None
            label = f"{viewport} {slug}"
            if response.status != 200:
                problems.append(f"{label}: answered {response.status}")
            page.screenshot(path=shots / f"{slug}-{viewport}.png", full_page=True)
            found = clipped_content(page) + run_axe(page) + errors.take()
            if overflow := horizontal_overflow(page):
                found.append(overflow)
            found += noticed(page, slug, phone=phone)
            problems += [f"{label}: {line}" for line in found]
        if phone:
            _asks_before_money_moves(page, live_server.url, tour)
        context.close()
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def _asks_before_money_moves(page: Page, base: str, tour: Tour) -> None:
    """Approve on the held list, Refund on an order page and recording what the provider's
    dashboard shows for a refund that needs attention ask first; cancelled, nothing moved."""
    page.goto(f"{base}/held/")
    page.get_by_role("button", name="Approve").click()
    dialog = page.get_by_role("dialog", name="Please confirm")
    expect(dialog).to_contain_text("$89.00")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    page.goto(f"{base}/orders/{tour.order_with_refunds.pk}/")
    page.get_by_label("Reason").select_option(index=1)
    page.get_by_role("button", name="Refund", exact=True).click()
    expect(page.get_by_role("heading", name="Confirm the refund")).to_be_visible()
    assert Refund.objects.get(pk=tour.held.pk).status == RefundStatus.HELD
    assert tour.order_with_refunds.refunds.count() == 1

    # "No refund was made" releases the reservation: the amount can be refunded again.
    page.goto(f"{base}/orders/{tour.attention.order_id}/")
    page.get_by_text("Record what the provider's dashboard shows").click()
    page.get_by_label("No refund was made (the reservation is released)").check()
    page.locator(f"#attention-{tour.attention.pk}").get_by_role("button", name="Continue").click()
    expect(page.locator(f"#attention-confirm-{tour.attention.pk}")).to_contain_text(
        "$24.00 is refundable again"
    )
    assert Refund.objects.get(pk=tour.attention.pk).status == RefundStatus.NEEDS_ATTENTION
