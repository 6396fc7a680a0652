"""Amounts a rail cannot take are never decided: Stripe's three-decimal currencies go in steps
of 10 (the last digit 0: KWD 3.333 is refused by Stripe, 3.330 is not), PayPal's HUF and TWD
in whole units written without decimals ("1000", never "1000.00").

Staff percentages round half up to that step, a fixed amount off it is refused
(``invalid_field``, never rounded), and an agent's ``min(remaining, max_amount)`` is taken down
to it. Against localstripe and the loopback PayPal, through the real pipeline.
"""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest
import stripe

from refunds.models import Refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import create_staff_refund, quote_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.rails.base import OffStep, RefundRequest
from sill.rails.paypal.resources import money_value
from sill.rails.stripe import StripeRail
from tests.conftest import site_owner
from tests.rails.localstripe_fixtures import KEY, charged_at_localstripe
from tests.rails.stripe_events import stripe_account
from tests.rails.test_paypal_refunds import _execute, _refund
from tests.refunds.conftest import ORIGINAL, purchase_intent, refund_intent

pytestmark = pytest.mark.django_db


@pytest.fixture
def kwd_paid(site, make_order, agent, localstripe_url) -> Charge:
    """A KWD 10.000 order the agent placed, really charged at localstripe."""
    return charged_at_localstripe(
        site, make_order, agent, localstripe_url, total="10.000", currency="KWD"
    )


@pytest.fixture
def staff_refund(site, members, django_capture_on_commit_callbacks):
    """``staff_refund(order, kind=..., ...)``: decided and executed (on commit)."""
    ensure_default_reasons(site)
    reason = add_reason(site=site, actor=site_owner(site), name="Goodwill")

    def make(order: Order, **kwargs) -> Refund:
        with django_capture_on_commit_callbacks(execute=True):
            made = create_staff_refund(
                site=site, order=order, actor=members["staff"].user, reason=reason, **kwargs
            )
        made.refresh_from_db()
        return made

    return make


def _stripe_refunds(sdk: stripe.StripeClient, charge: Charge) -> list[int]:
    listed = sdk.v1.refunds.list(params={"charge": charge.provider_charge_id})
    return sorted(r.amount for r in listed.data)


# --- Stripe: three-decimal currencies in steps of 10 ---------------------------------------


def test_percentages_of_a_kwd_charge_are_sent_to_stripe_in_its_10_fils_steps(
    kwd_paid, sdk, staff_refund
):
    order = Order.objects.get(pk=kwd_paid.order_id)
    pct = Decimal("33.33")
    preview = quote_staff_refund(order=order, charge=kwd_paid, kind="percentage", percentage=pct)
    assert preview.amount == Money(3330, "KWD")  # 3.3330 → 3.330, never 3.333
    assert "rounded half up to KWD 0.010" in preview.explanation
    assert "the smallest amount Stripe refunds in KWD" in preview.explanation

    made = [staff_refund(order, kind="percentage", percentage=pct) for _ in range(3)]
    assert [(r.status, r.amount_minor) for r in made] == [("succeeded", 3330)] * 3
    # What three thirds leave is refundable, and the refunds add up to the charge.
    last = staff_refund(order, kind="full")
    assert (last.status, last.amount_minor) == ("succeeded", 10)
    assert _stripe_refunds(sdk, kwd_paid) == [10, 3330, 3330, 3330]
    assert sdk.v1.charges.retrieve(kwd_paid.provider_charge_id).amount_refunded == 10000
    kwd_paid.refresh_from_db()
    assert (kwd_paid.amount_refunded_minor, kwd_paid.amount_reserved_minor) == (10000, 0)
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_a_fixed_kwd_amount_off_stripes_step_is_refused_never_rounded(kwd_paid, sdk, staff_refund):
    order = Order.objects.get(pk=kwd_paid.order_id)
    with pytest.raises(SillError) as refused:
        staff_refund(order, kind="amount", amount=Money(1235, "KWD"))
    assert (refused.value.code, refused.value.field) == ("invalid_field", "amount")
    assert "steps of KWD 0.010" in refused.value.message
    assert "KWD 1.230 or KWD 1.240" in refused.value.message
    assert not Refund.objects.exists()
    assert _stripe_refunds(sdk, kwd_paid) == []

    made = staff_refund(order, kind="amount", amount=Money(1230, "KWD"))
    assert (made.status, made.amount_minor) == ("succeeded", 1230)
    assert _stripe_refunds(sdk, kwd_paid) == [1230]


def test_an_agents_kwd_refund_is_taken_down_to_stripes_step_within_its_max_amount(
    kwd_paid, sdk, api, sign
):
    answer = api(sign(refund_intent(ORIGINAL, currency="KWD", max_amount=Decimal("7.005"))))
    body = answer.json()
    assert (body["decision"], body["amount"], body["currency"]) == ("approved", "7.000", "KWD")
    assert Refund.objects.get(pk=body["refund_id"]).status == "succeeded"
    assert _stripe_refunds(sdk, kwd_paid) == [7000]


def test_an_agents_max_amount_below_stripes_step_is_invalid(kwd_paid, sdk, api, sign):
    answer = api(sign(refund_intent(ORIGINAL, currency="KWD", max_amount=Decimal("0.005"))))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "signed.intent.max_amount")
    assert "steps of KWD 0.010" in error["message"]
    assert not Refund.objects.filter(amount_minor__gt=0).exists()
    assert _stripe_refunds(sdk, kwd_paid) == []


def test_the_stripe_rail_sends_no_refund_off_its_step():
    with socket.socket() as sock:  # nothing listens there: a call would be a connection error
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rail = StripeRail(secret_key=KEY, api_base=f"http://127.0.0.1:{port}")
    request = RefundRequest(
        refund_id="rf_kwd",
        idempotency_key="sill-refund-rf_kwd",
        amount=Money(1235, "KWD"),
        provider_charge_id="ch_kwd",
    )
    with pytest.raises(OffStep, match=r"steps of KWD 0\.010: KWD 1\.235 was not sent") as sent:
        rail.refund(request)
    assert not sent.value.retryable and not sent.value.ambiguous


# --- PayPal: HUF and TWD without decimals ---------------------------------------------------


def test_a_huf_capture_is_refunded_in_whole_forints_without_decimals(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="1000", currency="HUF")
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.amount == Money(100000, "HUF")
    refund, _ = _execute(refund)
    assert (refund.status, refund.failure_message) == ("succeeded", "")
    assert paypal.refund_calls[0]["body"]["amount"] == {"value": "1000", "currency_code": "HUF"}
    assert capture.refunded() == Decimal(1000)
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_a_huf_percentage_rounds_to_whole_forints_and_a_part_of_one_is_refused(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="1000", currency="HUF")
    with pytest.raises(SillError) as refused:
        _refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="amount",
            amount=Money(33330, "HUF"),
        )
    assert (refused.value.code, refused.value.field) == ("invalid_field", "amount")
    assert "PayPal refunds HUF only in steps of HUF 1.00" in refused.value.message
    assert paypal.refund_calls == []

    refund = _refund(
        site,
        members,
        order,
        django_capture_on_commit_callbacks,
        kind="percentage",
        percentage=Decimal("33.33"),
    )
    assert refund.amount == Money(33300, "HUF")  # 333.30 → 333
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    assert paypal.refund_calls[0]["body"]["amount"] == {"value": "333", "currency_code": "HUF"}
    assert capture.refunded() == Decimal(333)


@pytest.mark.parametrize(
    ("money", "value"),
    [(Money(100000, "HUF"), "1000"), (Money(33300, "TWD"), "333"), (Money(1250, "USD"), "12.50"),
     (Money(1200, "JPY"), "1200")],
)  # fmt: skip
def test_paypal_is_sent_each_currency_as_it_takes_it(money, value):
    assert money_value(money) == value


def test_paypal_is_sent_no_part_of_a_forint():
    with pytest.raises(OffStep, match=r"HUF 333\.30 was not sent"):
        money_value(Money(33330, "HUF"))


def test_a_purchase_whose_total_stripe_cannot_charge_is_refused_and_places_nothing(
    site, sign, api, localstripe_url
):
    # Seen: a KWD 10.125 purchase on Stripe was placed as an order and its charge sent, and
    # Stripe declined it (its three-decimal currencies go in steps of 10): the agent was told
    # "processing", then "failed". It is refused at once, as a refund's amount is.
    stripe_account(site, enabled=True, api_base=localstripe_url)
    line = {"sku": "KW-1", "name": "Beans", "quantity": 1, "unit_price": Decimal("10.125")}
    intent = purchase_intent(
        line_items=[line],
        quoted_total=Decimal("10.125"),
        currency="KWD",
        payment={"rail": "stripe", "payment_method": "pm_card_visa"},
    )
    answer = api(sign(intent))
    assert answer.status_code == 422, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "signed.intent.quoted_total")
    assert "steps of KWD 0.010" in error["message"]
    assert not Order.objects.filter(site=site).exists()

    on_step = purchase_intent(
        line_items=[{**line, "unit_price": Decimal("10.120")}],
        quoted_total=Decimal("10.120"),
        currency="KWD",
        payment={"rail": "stripe", "payment_method": "pm_card_visa"},
    )
    placed = api(sign(on_step))
    assert placed.status_code == 201, placed.content
    assert Charge.objects.get(order__site=site).amount_minor == 10120
