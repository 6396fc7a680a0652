"""The sweep: every page each role may open, on a desktop (1440 x 900) and a phone (390 x 844).

For each page: no horizontal overflow on the phone (``scrollWidth`` ≤ the viewport; the
failure names what sticks out), nothing cut off inside a box that hides its overflow (a table
row stacked as a card on the phone), no table that scrolls sideways on the desktop (its last
columns out of sight), no serious or critical axe-core violation, no console error or
uncaught exception, and a screenshot under ``screenshot_dir()/sweep/<role>/``. One browser
context per role and viewport, logged in once. Every problem of a role is collected and reported
together, so one run lists everything to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from playwright.sync_api import Browser, Page

from policies.catalog import TEMPLATES
from policies.engine import FiredRule
from policies.selectors import active_policy_for
from policies.services import apply_catalog_item
from policies.types import PolicyOutcome
from policies.vocabulary import FACTS_VERSION
from refunds.demo import DEMO_AGENT_ID, DEMO_ORDER_MANDATE, DEMO_PASSWORD, load_demo
from refunds.models import Decision, Refund, RefundKind, RefundOrigin, RefundStatus
from refunds.reconcile.differences import Difference
from refunds.reconcile.inbox import open_item
from refunds.services import new_refund, record_decision
from sill.accounts.models import Agent, Site
from sill.orders.models import Customer, Order
from tests.authorization_matrix import MATRIX, OK
from tests.e2e.accessibility import (
    ConsoleErrors,
    clipped_content,
    horizontal_overflow,
    run_axe,
    scrolling_tables,
)
from tests.refunds.conftest import hold_refund

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
# The demo's users, by the authorization matrix's role names ("refunder": staff who may refund).
ROLES = {
    "owner": "owner@northwind-coffee.example",
    "admin": "admin@northwind-coffee.example",
    "reviewer": "reviewer@northwind-coffee.example",
    "refunder": "staff@northwind-coffee.example",
}
TEMPLATE = "large-refund"


@dataclass(frozen=True)
class Visit:
    slug: str
    url_name: str
    kwargs: dict[str, str]
    query: str = ""


@dataclass(frozen=True)
class Demo:
    order_id: str
    held_id: str
    credit_id: str


def hold_credit(site: Site, agent: Agent) -> Refund:
    """A held Stripe customer-balance credit (its pages never call the rail)."""
    customer = Customer.objects.create(
        site=site, rail_customer_id="cus_SweepCredit001", email="cora@example.com", name="Cora"
    )
    now = timezone.now()
    with transaction.atomic():
        credit = new_refund(
            site=site, kind=RefundKind.CUSTOMER_CREDIT, origin=RefundOrigin.AGENT, agent=agent,
            customer=customer, amount_minor=1250, currency="USD", rail="stripe",
            reason_code="not_received", decision=Decision.ESCALATED, status=RefundStatus.HELD,
            expires_at=now + timedelta(hours=24),
            facts={
                "factsVersion": FACTS_VERSION, "refundAmount": 1250, "refundAmountUsd": 1250,
                "creditCustomerAgeDays": 3, "refundAgentTotalTodayUsd": 1250,
                "refundReason": "not_received", "refundOrigin": "agent", "rail": "stripe",
                "currency": "USD",
            },
            rules=[{"id": "tpl-credit-new-customer", "action": "require_approval", "mode": "enforced"}],
        )  # fmt: skip
        # What the credit-new-customer rule (applied by ``demo``) decided, as decide_credit says it.
        outcome = PolicyOutcome(
            action="require_approval",
            policy_version=active_policy_for(site).label,
            rules=(FiredRule("tpl-credit-new-customer", "require_approval"),),
            facts=credit.facts,
        )
        return record_decision(refund=credit, outcome=outcome, now=now)


def open_differences(order: Order, credit: Refund) -> None:
    """One open reconciliation item of a charge and one of a customer's credits."""
    open_item(
        charge=order.charges.get(),
        difference=Difference(
            kind="amount_differs", subject="gid://shopify/Refund/1099511627776123",
            provider_refund_id="gid://shopify/Refund/1099511627776123",
            currency="USD", sill_amount_minor=1000, rail_amount_minor=900, rail_currency="USD",
            sill_status="succeeded", rail_status="succeeded",
            detail="Sill settled $10.00; the rail refunded $9.00.",
        ),
    )  # fmt: skip
    open_item(
        customer=credit.customer,
        difference=Difference(
            kind="missing_in_sill", subject="cbtxn_SweepOutside01",
            provider_refund_id="cbtxn_SweepOutside01", currency="USD", rail_amount_minor=700,
            rail_currency="USD", rail_status="succeeded",
            detail=(
                "Stripe's balance transaction names Sill credit rfd_SweepUnknown, which Sill "
                "does not have for this customer, so Sill does not count it as credited."
            ),
        ),
    )  # fmt: skip


@pytest.fixture
def demo() -> Demo:
    """The demo site with one held refund (the real agent path) and one rule from a template."""
    site = load_demo().site
    order = Order.objects.get(site=site, source_mandate_id=DEMO_ORDER_MANDATE)
    held: Refund = hold_refund(
        order=order, agent=Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID)
    )
    owner = get_user_model().objects.get(username=ROLES["owner"])
    apply_catalog_item(site=site, actor=owner, item=TEMPLATES[TEMPLATE])
    apply_catalog_item(site=site, actor=owner, item=TEMPLATES["credit-new-customer"])
    credit = hold_credit(site, Agent.objects.get(site=site, agent_id=DEMO_AGENT_ID))
    open_differences(order, credit)
    return Demo(order_id=str(order.id), held_id=str(held.id), credit_id=str(credit.id))


def visits(demo: Demo) -> list[Visit]:
    return [
        Visit("dashboard", "orders:dashboard", {}),
        Visit("orders", "orders:list", {}),
        Visit("order", "orders:detail", {"order_id": demo.order_id}),
        Visit(
            "order-transactions", "orders:detail", {"order_id": demo.order_id}, "?tab=transactions"
        ),
        Visit("refunds", "refunds:list", {}),
        Visit("held", "refunds:held", {}),
        Visit("held-detail", "refunds:held-detail", {"refund_id": demo.held_id}),
        Visit("refund", "refunds:detail", {"refund_id": demo.held_id}),
        Visit("held-credit", "refunds:held-detail", {"refund_id": demo.credit_id}),
        Visit("credit", "refunds:detail", {"refund_id": demo.credit_id}),
        Visit("reconcile", "refunds:reconcile", {}),
        Visit("rules", "policies:rules", {}),
        Visit("rule-templates", "policies:templates", {}),
        Visit("rule-template-preview", "policies:template-preview", {"item_id": TEMPLATE}),
        # A template about credits: its preview replays the held credit.
        Visit(
            "rule-template-preview-credit",
            "policies:template-preview",
            {"item_id": "credit-new-customer"},
        ),
        Visit("activity", "audit:activity", {}),
        Visit("settings", "settings:index", {}),
        Visit("reasons", "refunds:reasons", {}),
        Visit("rails", "settings:rails", {}),
        Visit("agents", "settings:agents", {}),
        Visit("members", "settings:members", {}),
        Visit("slack", "refunds:slack-settings", {}),
        Visit("account", "settings:account", {}),
        Visit("two-factor-setup", "settings:two-factor-setup", {}),
    ]


def allowed(visit: Visit, role: str) -> bool:
    row = MATRIX.get(visit.url_name)
    return row is not None and row.methods.get("GET", {}).get(role) == OK


def check(
    page: Page, errors: ConsoleErrors, *, label: str, phone: bool, status: int | None = None
) -> list[str]:
    """Every problem on the page now showing, each line prefixed with ``label``."""
    found = []
    if phone and (overflow := horizontal_overflow(page)):
        found.append(overflow)
    found += clipped_content(page)
    if not phone:
        found += scrolling_tables(page)
    found += run_axe(page)
    found += errors.take(expected_status=status)
    return [f"{label}: {line}" for line in found]


def sign_in(page: Page, base: str, email: str) -> None:
    """Log in and wait to leave the login page (not for the dashboard: a broken dashboard is a
    finding of the sweep, not a reason to stop it)."""
    page.goto(f"{base}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)


def sweep(
    browser: Browser, base: str, role: str, pages: list[tuple[str, str, int]], shots
) -> list[str]:
    """Visit ``pages`` ((slug, path, expected status)) at both viewports as ``role``."""
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        errors = ConsoleErrors(page)
        if role != "anonymous":
            sign_in(page, base, ROLES[role])
            errors.take()  # the dashboard after login is checked in its own turn
        for slug, path, status in pages:
            response = page.goto(f"{base}{path}")
            assert response is not None
            label = f"{role} {viewport} {slug} ({path})"
            if response.status != status:
                problems.append(f"{label}: answered {response.status}, expected {status}")
            problems += check(page, errors, label=label, phone=viewport == "phone", status=status)
            page.screenshot(path=shots / role / f"{slug}-{viewport}.png", full_page=True)
        context.close()
    return problems


@pytest.fixture
def shots(screenshot_dir):
    path = screenshot_dir / "sweep"
    for role in (*ROLES, "anonymous"):
        (path / role).mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("role", list(ROLES))
def test_every_page_of_a_role_fits_a_phone_and_passes_axe(role, browser, live_server, demo, shots):
    pages = []
    for visit in visits(demo):
        if not allowed(visit, role):
            continue
        try:
            path = reverse(visit.url_name, kwargs=visit.kwargs) + visit.query
        except NoReverseMatch:  # a page another change has not added yet
            continue
        pages.append((visit.slug, path, 200))
    pages.append(("not-found", "/orders/no-such-order/", 404))
    if role == "reviewer":
        pages.append(("forbidden", reverse("settings:index"), 403))
    problems = sweep(browser, live_server.url, role, pages, shots)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_the_signed_out_pages_fit_a_phone_and_pass_axe(browser, live_server, demo, shots):
    pages = [("login", reverse("accounts:login"), 200), ("not-found", "/no-such-page/", 404)]
    problems = sweep(browser, live_server.url, "anonymous", pages, shots)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
