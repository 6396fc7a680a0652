"""Captures of a PayPal merchant account whose REST app the site replaced with another's.

A REST app's client id and secret are one merchant account's, and a capture is its payee's
alone. A merchant who saved merchant A's app, had orders paid to A, then saved merchant B's app
found every refund of A's captures approved ("approved, processing" to the agent) and then
failed at PayPal (404 ``RESOURCE_NOT_FOUND``: B's app is shown no such capture), and every
reconciliation counted them unreadable. Sill now asks PayPal which merchant a saved app acts on
(its balances report's ``account_id``), records on each PayPal charge the merchant its capture
was paid to (``payee.merchant_id``), and refuses a capture of an earlier merchant at decision
time in the words an earlier Stripe account's is, leaving it out of reconciliation.

The loopback PayPal (tests/rails/paypal_stub.py) keeps each merchant's captures apart, as
PayPal does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.test import Client

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.reconcile.runs import run_reconciliation
from sill.accounts import two_factor
from sill.errors import SillError
from sill.orders.models import Charge, Order, OrderStatus
from sill.rails.left_behind import payment_left_behind
from sill.rails.models import RailAccount
from sill.rails.payment_account import learn_payment_accounts_task
from sill.rails.paypal.connect import configure_paypal
from tests.rails.paypal_stub import (
    CLIENT_ID,
    CLIENT_SECRET,
    MERCHANT_ID,
    WEBHOOK_ID,
    PayPalStub,
    StubCapture,
)
from tests.rails.test_rail_change_audit import rail_changes, verified
from tests.rails.test_shopify_shop_switch import _staff_refund
from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

MERCHANT_B = "W3XKEA9QZ8M2J"
CLIENT_B = "BcDeFgHiJkLmNoPqRsTuVwXyZ0123456789sillclientb"
SECRET_B = "GHiJkLmNoPqRsTuVwXyZ0123456789sillsecretofb"
LATER = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTP"  # the purchase mandate of an order paid to B


@pytest.fixture
def save_app(
    site, members, paypal: PayPalStub, paypal_account, settings, django_capture_on_commit_callbacks
) -> Callable[[str, str], None]:
    """``save_app(CLIENT_B, SECRET_B)``: the owner saves a REST app's credentials on Settings
    → Rails' service, and what it enqueues runs (asking PayPal which merchant the app is)."""
    settings.DEBUG = True  # the API address override (the loopback PayPal) needs DEBUG
    paypal.add_app(client_id=CLIENT_B, secret=SECRET_B, merchant=MERCHANT_B)

    def save(client_id: str, secret: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            configure_paypal(
                site=site,
                actor=members["owner"].user,
                client_id=client_id,
                client_secret=secret,
                mode="test",
                webhook_id=WEBHOOK_ID,
                api_base=paypal.url,
                second_factor=two_factor.OPERATOR,
            )

    return save


@pytest.fixture
def paid(make_order, agent, paypal: PayPalStub) -> Callable[..., tuple[Charge, StubCapture]]:
    """``paid(mandate_id, merchant)``: an $89.00 order the agent placed, paid by PayPal to
    ``merchant`` (its capture), as it reaches Sill: naming no merchant account."""

    def make(mandate_id: str, merchant: str) -> tuple[Charge, StubCapture]:
        capture = paypal.add_capture(amount="89.00", merchant=merchant)
        order = make_order(
            rail="paypal", placed_by_agent=agent, source_mandate_id=mandate_id, days_ago=3
        )
        Charge.objects.filter(order=order).update(
            provider_charge_id=capture.id, provider_payment_id=capture.order_id
        )
        return Charge.objects.get(order=order), capture

    return make


def _agent_refund(sign, django_capture_on_commit_callbacks, mandate_id: str) -> dict:
    body = sign(refund_intent(mandate_id, max_amount=Decimal("89.00")))
    with django_capture_on_commit_callbacks(execute=True):
        return post(Client(), body).json()


def _account(site) -> RailAccount:
    return RailAccount.objects.get(site=site, rail="paypal")


def test_a_saved_app_is_named_by_its_merchant_and_charges_by_their_captures_payee(
    site, save_app, paid
):
    old, _ = paid(ORIGINAL, MERCHANT_ID)
    save_app(CLIENT_ID, CLIENT_SECRET)
    assert _account(site).payment_account == MERCHANT_ID
    old.refresh_from_db()
    assert old.payment_account == MERCHANT_ID  # its capture's payee, read with A's app

    save_app(CLIENT_B, SECRET_B)
    assert _account(site).payment_account == MERCHANT_B
    new, _ = paid(LATER, MERCHANT_B)
    learn_payment_accounts_task()  # the beat task names charges that came in since
    new.refresh_from_db()
    old.refresh_from_db()
    assert (new.payment_account, old.payment_account) == (MERCHANT_B, MERCHANT_ID)


def test_an_agent_refund_of_an_earlier_merchants_capture_is_refused_at_decision(
    site, members, save_app, paid, paypal, sign, agent_key, django_capture_on_commit_callbacks
):
    save_app(CLIENT_ID, CLIENT_SECRET)
    old, capture = paid(ORIGINAL, MERCHANT_ID)
    learn_payment_accounts_task()
    save_app(CLIENT_B, SECRET_B)

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)

    assert answer["decision"] == "rejected", answer
    assert answer["reason"] == "rail_disabled"
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("rejected", "rail_disabled")
    with pytest.raises(SillError) as refused:
        _staff_refund(site, members, old.order, django_capture_on_commit_callbacks)
    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert refused.value.message == (
        f"This order came from the PayPal account {MERCHANT_ID}, which this site is no longer "
        f"connected to (it is now connected to {MERCHANT_B}), so it cannot be refunded through "
        f"Sill until {MERCHANT_ID} is connected again."
    )
    assert paypal.refund_calls == []  # nothing was sent to PayPal
    assert capture.refunds == []
    old.refresh_from_db()
    assert old.amount_reserved_minor == 0 and old.amount_refunded_minor == 0
    assert Order.objects.get(pk=old.order_id).status == OrderStatus.PAID


def test_a_capture_of_the_merchant_connected_now_refunds_as_before(
    site, save_app, paid, paypal, sign, agent_key, django_capture_on_commit_callbacks
):
    save_app(CLIENT_ID, CLIENT_SECRET)
    paid(ORIGINAL, MERCHANT_ID)
    learn_payment_accounts_task()
    save_app(CLIENT_B, SECRET_B)
    new, capture = paid(LATER, MERCHANT_B)
    learn_payment_accounts_task()

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, LATER)

    assert answer["decision"] == "approved", answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"
    assert len(paypal.refund_calls) == 1 and len(capture.refunds) == 1
    new.refresh_from_db()
    assert (new.payment_account, new.amount_refunded_minor) == (MERCHANT_B, 8900)


def test_captures_naming_no_merchant_refund_as_before(
    site, save_app, paid, paypal, sign, agent_key, django_capture_on_commit_callbacks
):
    """Charges from before Sill kept the merchant, and any while the app's merchant is
    unknown (an app without the balances scope), are refused nothing."""
    save_app(CLIENT_ID, CLIENT_SECRET)
    old, capture = paid(ORIGINAL, MERCHANT_ID)
    assert old.payment_account == ""  # not read yet: unknown

    answer = _agent_refund(sign, django_capture_on_commit_callbacks, ORIGINAL)

    assert answer["decision"] == "approved", answer
    assert Refund.objects.get(pk=answer["refund_id"]).status == "succeeded"
    assert len(capture.refunds) == 1

    paypal.no_balances.add(CLIENT_B)
    save_app(CLIENT_B, SECRET_B)
    assert _account(site).payment_account == ""  # PayPal would not say: unknown
    _, later = paid(LATER, MERCHANT_B)
    assert learn_payment_accounts_task() == 0
    answer = _agent_refund(sign, django_capture_on_commit_callbacks, LATER)
    assert answer["decision"] == "approved", answer
    assert len(later.refunds) == 1


def test_reconciliation_leaves_an_earlier_merchants_captures_behind_not_unreadable(
    site, save_app, paid, client_for
):
    save_app(CLIENT_ID, CLIENT_SECRET)
    paid(ORIGINAL, MERCHANT_ID)
    learn_payment_accounts_task()
    save_app(CLIENT_B, SECRET_B)
    paid(LATER, MERCHANT_B)
    learn_payment_accounts_task()
    account = _account(site)

    run = run_reconciliation(account_id=account.pk, force=True)

    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable) == (1, 0)
    [left] = payment_left_behind(site_id=site.pk, rail="paypal", connected=MERCHANT_B)
    assert (left.account, left.orders) == (MERCHANT_ID, 1)
    page = client_for("owner").get("/settings/rails/").content.decode()
    assert "Orders of an earlier PayPal account" in page
    assert f"{MERCHANT_ID} is connected again" in page


def test_the_merchant_paypal_names_and_the_charges_it_names_are_signed(
    site, save_app, paid, client_for
):
    """Which merchant the app acts on, and which charges were paid to it, decide which refunds
    Sill refuses: each is a signed record, written once, when PayPal names it."""
    old, capture = paid(ORIGINAL, MERCHANT_ID)
    save_app(CLIENT_ID, CLIENT_SECRET)

    named = [body for body in rail_changes(site) if body["action"] == "account_named"]
    assert named == [
        {"rail": "paypal", "action": "account_named", "mode": "test", "actor": None,
         "payment_account": MERCHANT_ID, "payment_account_before": ""}
    ]  # fmt: skip
    [charge] = [
        json.loads(r.payload)["body"] for r in AuditRecord.objects.filter(site=site, kind="charge")
    ]
    assert (charge["charge_id"], charge["order_id"]) == (old.pk, old.order_id)
    assert (charge["provider_charge_id"], charge["payment_account"]) == (capture.id, MERCHANT_ID)
    assert charge["source"] == "paypal: the capture's payee"
    count = AuditRecord.objects.filter(site=site).count()
    learn_payment_accounts_task()  # nothing new to name: nothing recorded
    assert AuditRecord.objects.filter(site=site).count() == count
    verified()
    page = client_for("owner").get("/activity/").content.decode()
    assert f"PayPal account named: {MERCHANT_ID}" in page
    assert f"Paid to the PayPal account {MERCHANT_ID}" in page
