"""A purchase on a rail that could not take the money is refused when the mandate is answered
(``rejected``, ``rail_disabled``), before any charge exists: a rail switched off, in live mode
on a deployment that does not allow live money, or whose stored API key no key opens. It is
never answered "approved, processing" and then failed by the worker as if the rail had
declined the card (``charge_failed``)."""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, override_settings

from audit.models import AuditRecord
from audit.selectors import chain_verification
from refunds.models import Mandate
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry, RailAccount
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db

KEY = "sk_test_51UnreadablePurchaseKey0000000XYZ9"
LOST = "the-secret-key-that-was-rotated-away-" + "p" * 40


def live(account: RailAccount) -> None:
    account.mode = "live"
    account.save()


def switched_off(account: RailAccount) -> None:
    account.enabled = False
    account.save()


def key_unreadable(account: RailAccount) -> None:
    account.rail = "stripe"
    with override_settings(SECRET_KEY=LOST, SECRET_KEY_FALLBACKS=[]):
        account.set_secret(KEY)
    account.save()


@pytest.mark.parametrize("unusable", [live, switched_off, key_unreadable])
def test_it_is_refused_rail_disabled_before_anything_is_charged(
    sign: Callable[..., bytes],
    mock_rail: RailAccount,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    unusable: Callable[[RailAccount], None],
) -> None:
    settings.SILL_ALLOW_LIVE = False
    unusable(mock_rail)
    body = sign(purchase_intent(payment={"rail": mock_rail.rail, "payment_method": "pm_visa"}))

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = post(Client(), body)

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["decision"], answer["status"], answer["reason"]) == (
        "rejected",
        "rejected",
        "rail_disabled",
    )
    order = Order.objects.get(pk=answer["order_id"])
    assert order.status == "CANCELLED"
    assert not Charge.objects.exists()  # no charge to try, nothing enqueued to try it
    assert callbacks == []
    assert not MockLedgerEntry.objects.exists()
    # Asked again, the agent hears the same refusal.
    assert post(Client(), body).json() == answer
    assert Mandate.objects.count() == 1


@pytest.mark.parametrize("unusable", [live, switched_off, key_unreadable])
def test_its_refusal_is_a_signed_decision_record_naming_the_mandate(
    sign: Callable[..., bytes],
    mock_rail: RailAccount,
    settings: Any,
    unusable: Callable[[RailAccount], None],
) -> None:
    # Seen: a refund refused at intake wrote its signed "rejected" record, a purchase refused
    # there wrote nothing, so the log held no trace of the agent's request or Sill's answer.
    settings.SILL_ALLOW_LIVE = False
    unusable(mock_rail)
    body = sign(purchase_intent(payment={"rail": mock_rail.rail, "payment_method": "pm_visa"}))

    answer = post(Client(), body).json()

    record = AuditRecord.objects.get(site=mock_rail.site)
    written = json.loads(record.payload)["body"]
    assert record.kind == "rejected"
    assert (written["decision"], written["reason"], written["kind"]) == (
        "rejected",
        "rail_disabled",
        "purchase",
    )
    assert (written["order_id"], written["mandate_id"]) == (
        answer["order_id"],
        answer["mandate_id"],
    )
    assert (written["amount_minor"], written["currency"]) == (8900, "USD")
    # The exact bytes the agent sent, as a refund's decision binds them.
    assert written["mandate_sha256"] == hashlib.sha256(body).hexdigest()
    assert record.subject_order_id == answer["order_id"]
    assert chain_verification(mock_rail.site).ok
    # The answer is as documented: a purchase carries no receipt.
    assert answer["receipt"] is None
    # Asked again, the stored answer: no second decision.
    assert post(Client(), body).json() == answer
    assert AuditRecord.objects.filter(site=mock_rail.site).count() == 1


@pytest.mark.parametrize("rail", ["shopify", "woocommerce", "paypal"])
def test_a_purchase_on_a_rail_that_takes_no_payments_is_invalid_and_stores_nothing(
    sign: Callable[..., bytes], mock_rail: RailAccount, rail: str
) -> None:
    # Seen: the schema took them, the purchase was answered "approved, processing", and the
    # worker then failed its charge (charge_failed): Shopify, WooCommerce and PayPal orders are
    # paid at their own checkouts, and those rails refuse every charge from Sill.
    body = sign(purchase_intent(payment={"rail": rail, "payment_method": "pm_visa"}))
    response = post(Client(), body)
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "signed.intent.payment.rail")
    assert error["message"].endswith("must be one of mock, stripe.")
    assert not Order.objects.exists() and not Mandate.objects.exists()


def test_the_merchant_reads_its_refusal_in_words_on_activity_the_csv_and_the_order_page(
    sign: Callable[..., bytes], mock_rail: RailAccount, client_for: Callable[[str], Client]
) -> None:
    # Seen: Activity showed the refusal as "Rejected" with "Rail disabled" under an empty
    # refund, the CSV as a bare "Rejected" line, and the order page only "Not charged".
    switched_off(mock_rail)
    body = sign(
        purchase_intent(
            currency="EUR",
            payment={"rail": mock_rail.rail, "payment_method": "pm_visa"},
        )
    )
    answer = post(Client(), body).json()
    order = Order.objects.get(pk=answer["order_id"])
    words = "Purchase refused: the rail is off or can't take payments"
    owner = client_for("owner")

    page = html.unescape(owner.get("/activity/").content.decode())
    row = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert words in row
    assert "Rail disabled" not in row and "rail_disabled" not in row
    assert f'href="/orders/{order.pk}/">#{order.number}</a>' in row
    assert "€89.00" in row

    export = owner.get("/activity/", {"format": "csv"})
    lines = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert lines[1][2:] == [
        "Rejected",
        "",
        str(order.number),
        "89.00",
        "EUR",
        "Test shopper (agent_test_shopper)",  # named, as the page names it
        words,
    ]

    shown = html.unescape(owner.get(f"/orders/{order.pk}/").content.decode())
    refusal = shown.split('id="purchase-refusal"', 1)[1].split("</div>", 1)[0]
    assert f"Not charged. {words}." in refusal
    assert "signed in the audit log as record #1" in refusal
    assert 'href="/settings/rails/">Open rail settings' in refusal
    # Staff see why too, without the link to settings they cannot change.
    staff = html.unescape(client_for("staff").get(f"/orders/{order.pk}/").content.decode())
    assert words in staff and "Open rail settings" not in staff
