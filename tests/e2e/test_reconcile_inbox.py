"""The Reconciliation inbox in the browser, and an order with a refund made outside Sill and a
dispute. The inbox's differences come from a real reconciliation run against localstripe."""

from __future__ import annotations

from datetime import timedelta

import pytest
import stripe
from django.db.models import F
from django.utils import timezone
from playwright.sync_api import Page, expect

from refunds.demo import load_demo
from refunds.models import ReconciliationItem, Refund
from refunds.reconcile.runs import run_reconciliation
from sill.accounts.models import Site
from sill.money import Money
from sill.orders.models import Charge, ChargeStatus, DisputeStatus, Order, OrderStatus
from sill.orders.outside import (
    OutsideRefund,
    ReportedDispute,
    record_dispute,
    record_outside_refund,
)
from sill.orders.services import NewLine, create_order
from sill.rails.base import ChargeRequest
from sill.rails.stripe import StripeRail
from tests.e2e.conftest import log_in
from tests.localstripe import localstripe_url  # noqa: F401  (the fixture, by name)
from tests.rails.stripe_events import stripe_account

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

KEY = "sk_test_sill_webhooks_0001"  # what tests.rails.stripe_events.stripe_account stores


def _charged(site: Site, base: str, number: str, total_minor: int, name: str) -> Charge:
    """An order of the demo site, really charged at localstripe."""
    order = create_order(
        site=site,
        lines=[NewLine(sku="NW-E2E", name=name, quantity=1, unit_price=Money(total_minor, "USD"))],
        currency="USD",
        buyer_name="Grace Hopper",
        buyer_email="grace@example.com",
        number=number,
    )
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.PAID)
    result = StripeRail(secret_key=KEY, api_base=base).charge(
        ChargeRequest(
            order_id=order.pk,
            amount=Money(total_minor, "USD"),
            payment_method="pm_card_visa",
            idempotency_key=f"sill-charge-{order.pk}",
        )
    )
    return Charge.objects.create(
        order=order,
        rail="stripe",
        provider_charge_id=result.provider_charge_id,
        provider_payment_id=result.provider_payment_id,
        amount_minor=total_minor,
        currency="USD",
        captured_at=timezone.now() - timedelta(hours=3),
        status=ChargeStatus.SUCCEEDED,
    )


def _settled(charge: Charge, amount_minor: int, **fields: object) -> Refund:
    refund = Refund.objects.create(
        site=charge.order.site,
        order=charge.order,
        charge=charge,
        origin="staff",
        amount_minor=amount_minor,
        currency="USD",
        rail="stripe",
        decision="approved",
        **fields,
    )
    if refund.status == "succeeded":
        Charge.objects.filter(pk=charge.pk).update(
            amount_refunded_minor=F("amount_refunded_minor") + amount_minor
        )
    if refund.status == "needs_attention":
        Charge.objects.filter(pk=charge.pk).update(
            amount_reserved_minor=F("amount_reserved_minor") + amount_minor
        )
    return refund


def _seed_differences(site: Site, base: str) -> None:
    account = stripe_account(site, enabled=True, api_base=base)
    sdk = stripe.StripeClient(KEY, base_addresses={"api": base}, max_network_retries=0)
    # Refunded in the Stripe dashboard, and the webhook never came.
    outside = _charged(site, base, "2001", 4200, "Espresso Grinder Burrs")
    sdk.v1.refunds.create(params={"charge": outside.provider_charge_id, "amount": 1500})
    # Settled in Sill under an id Stripe does not have.
    missing = _charged(site, base, "2002", 5600, "Gooseneck Kettle")
    _settled(missing, 2000, status="succeeded", provider_refund_id="re_never_at_stripe")
    # Sill settled $25.00; Stripe refunded $20.00.
    differs = _charged(site, base, "2003", 6400, "Cold Brew Tower")
    refund = _settled(differs, 2500, status="succeeded")
    made = sdk.v1.refunds.create(
        params={
            "charge": differs.provider_charge_id,
            "amount": 2000,
            "metadata": {"sill_refund_id": refund.id},
        }
    )
    Refund.objects.filter(pk=refund.pk).update(provider_refund_id=made.id)
    # A refund Sill cannot confirm: needs attention.
    flagged = _charged(site, base, "2004", 3900, "Travel Mug")
    _settled(
        flagged,
        3900,
        status="needs_attention",
        attention_since=timezone.now() - timedelta(minutes=40),
        failure_message="Stripe did not answer in time",
    )
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.items_opened == 3, run


def test_an_owner_sees_the_inbox_and_resolves_a_difference(
    page: Page, live_server, screenshot_dir, request
):
    site = Site.objects.get(pk=load_demo().site.pk)
    _seed_differences(site, request.getfixturevalue("localstripe_url"))
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.get_by_role("link", name="Reconciliation").click()
    expect(page.get_by_role("heading", name="Reconciliation", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="1 refund needs attention")).to_be_visible()
    for kind in ("At the rail, not in Sill", "In Sill, not at the rail", "Amounts differ"):
        expect(page.locator("article.recon-item", has_text=kind)).to_have_count(1)
    expect(page.get_by_text("Stripe last checked")).to_be_visible()
    page.screenshot(path=screenshot_dir / "reconcile-inbox.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=screenshot_dir / "reconcile-inbox-phone.png", full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})

    item = ReconciliationItem.objects.get(kind="missing_at_rail")
    card = page.locator(f"#item-{item.pk}")
    card.get_by_text("Resolve this difference").click()
    card.get_by_role("button", name="Resolve").click()  # no outcome, no note: the browser asks
    assert ReconciliationItem.objects.get(pk=item.pk).resolved_at is None
    card.get_by_label("Fixed at the rail").check()
    card.get_by_label("Note (kept in the signed audit log)").fill(
        "Refunded again in the Stripe dashboard (re_2002_fix)."
    )
    page.screenshot(path=screenshot_dir / "reconcile-resolve-form.png", full_page=False)
    card.get_by_role("button", name="Resolve").click()
    done = "Resolved “In Sill, not at the rail” on order #2002: fixed at the rail."
    expect(page.get_by_text(done)).to_be_visible()
    expect(page.locator(f"#resolved-{item.pk}")).to_contain_text("Fixed at the rail")
    expect(page.locator(f"#item-{item.pk}")).to_have_count(0)
    page.screenshot(path=screenshot_dir / "reconcile-resolved.png", full_page=True)
    item.refresh_from_db()
    assert item.resolution == "fixed_at_rail" and item.resolved_by is not None


def test_an_order_shows_a_refund_made_outside_sill_and_a_dispute(
    page: Page, live_server, screenshot_dir
):
    demo = load_demo()
    order = Order.objects.filter(site=demo.site, status="PAID").order_by("number").first()
    assert order is not None
    charge = Charge.objects.get(order=order, status="succeeded")
    now = timezone.now()
    record_outside_refund(
        charge=charge,
        refund=OutsideRefund(
            provider_refund_id="re_dashboard_e2e",
            amount_minor=1200,
            currency=charge.currency,
            status="succeeded",
            created_at_rail=now - timedelta(hours=2),
        ),
        event_id="evt_e2e_refund",
        event_at=now,
    )
    record_dispute(
        charge=charge,
        dispute=ReportedDispute(
            provider_dispute_id="dp_e2e",
            reason="product_not_received",
            amount_minor=charge.amount_minor - 1200,
            currency=charge.currency,
            status=DisputeStatus.NEEDS_RESPONSE,
            rail_status="needs_response",
            opened_at=now - timedelta(hours=1),
        ),
        event_id="evt_e2e_dispute",
        event_at=now,
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_server.url, "owner@northwind-coffee.example")
    page.goto(f"{live_server.url}/orders/{order.pk}/")
    expect(page.locator("article.charge")).to_contain_text("Dispute")
    expect(page.locator("article.charge")).to_contain_text("Product not received")
    page.screenshot(path=screenshot_dir / "order-outside-refund-dispute.png", full_page=True)
    page.get_by_role("tab", name="Transactions").click()
    row = page.locator("#transactions tr.tx-external_refund")
    expect(row).to_contain_text("Refund outside Sill")
    expect(row).to_contain_text("re_dashboard_e2e")
    expect(row).to_contain_text("$12.00")
    page.screenshot(path=screenshot_dir / "order-outside-refund-transactions.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(
        path=screenshot_dir / "order-outside-refund-transactions-phone.png", full_page=True
    )
