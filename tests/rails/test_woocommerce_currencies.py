"""WooCommerce orders in zero- and three-decimal currencies: the total the store writes (with its
price decimals), the charge Sill records, and what Stripe (localstripe) is sent on refund.

The WooCommerce Stripe gateway charges a three-decimal currency's total with its last digit
taken down to 0 (``WC_Stripe_Helper::get_stripe_amount``: Stripe takes BHD, JOD, KWD, OMR and
TND in steps of 10 only), and a zero-decimal one's rounded to a whole unit.
"""

from __future__ import annotations

from decimal import Decimal
from importlib import import_module

import pytest
from django.apps import apps as django_apps

from refunds.execution import execute_refund
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order
from sill.rails.woocommerce.models import WooOrderLink
from sill.rails.woocommerce.sync import sync_orders
from tests.rails.stripe_events import stripe_account

pytestmark = pytest.mark.django_db


def _paid(sdk, amount_minor: int, currency: str) -> tuple[str, str]:
    intent = sdk.v1.payment_intents.create(
        params={
            "amount": amount_minor,
            "currency": currency.lower(),
            "payment_method": "pm_card_visa",
            "payment_method_types": ["card"],
            "confirm": True,
        }
    )
    charge = intent.latest_charge
    return intent.id, charge if isinstance(charge, str) else charge.id


def _synced(site, woo, sdk, *, total: str, currency: str, charged_minor: int):
    """A Woo order whose store writes ``total`` (its own price decimals), paid at localstripe
    as the Stripe gateway charges it (``charged_minor``), synced into Sill."""
    intent, charge = _paid(sdk, charged_minor, currency)
    placed = woo.add_order(
        total=total,
        currency=currency,
        stripe_intent=intent,
        stripe_charge=charge,
        overrides={
            "total": total,
            "line_items": [{"id": 7, "name": "Oud", "sku": "OUD-1", "quantity": 1, "total": total}],
        },
    )
    sync_orders(site=site)
    return WooOrderLink.objects.get(woo_order_id=placed.id).order, placed, charge


def _staff_refund(site, members, order, capture, **kwargs) -> Refund:
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with capture(execute=False):
        refund = create_staff_refund(
            site=site, order=order, actor=members["staff"].user, reason=reason, **kwargs
        )
    execute_refund(refund.pk)
    return Refund.objects.get(pk=refund.pk)


@pytest.fixture
def stripe_on(site, localstripe_url):
    stripe_account(site, enabled=True, api_base=localstripe_url)


def test_a_kwd_order_written_to_the_fils_is_refunded_in_full_as_stripe_charged_it(
    site, members, woo, woo_account, stripe_on, sdk, django_capture_on_commit_callbacks
):
    # The store writes KWD 10.125; its Stripe gateway charged KWD 10.120 (Stripe's step).
    order, _placed, charge_id = _synced(
        site, woo, sdk, total="10.125", currency="KWD", charged_minor=10120
    )
    charge = Charge.objects.get(order=order)
    assert (charge.amount_minor, charge.currency) == (10120, "KWD")
    assert Order.objects.get(pk=order.pk).total == Money(10125, "KWD")

    refund = _staff_refund(site, members, order, django_capture_on_commit_callbacks, kind="full")
    assert (refund.status, refund.amount_minor) == ("succeeded", 10120), refund.failure_message
    assert sdk.v1.charges.retrieve(charge_id).amount_refunded == 10120
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_a_kwd_order_is_refunded_by_percentages_in_stripes_steps_never_past_its_charge(
    site, members, woo, woo_account, stripe_on, sdk, django_capture_on_commit_callbacks
):
    order, _placed, charge_id = _synced(
        site, woo, sdk, total="10.125", currency="KWD", charged_minor=10120
    )
    made = [
        _staff_refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="percentage",
            percentage=Decimal("50"),
        )
        for _ in range(2)
    ]
    # 50 % of 10.125 = 5.0625 → 5.060 (half up to 10 fils); the second is what is left.
    assert [(r.status, r.amount_minor) for r in made] == [("succeeded", 5060)] * 2
    assert sdk.v1.charges.retrieve(charge_id).amount_refunded == 10120
    # Nothing is left: the 5 fils the store wrote were never charged, so none is refunded.
    with pytest.raises(SillError) as refused:
        _staff_refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="percentage",
            percentage=Decimal("50"),
        )
    assert refused.value.code == "order_not_refundable"
    assert Refund.objects.filter(order=order).count() == 2
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_a_jpy_order_is_refunded_in_whole_yen(
    site, members, woo, woo_account, stripe_on, sdk, django_capture_on_commit_callbacks
):
    # A JPY store writes its totals without decimals.
    order, _placed, charge_id = _synced(
        site, woo, sdk, total="1201", currency="JPY", charged_minor=1201
    )
    assert Charge.objects.get(order=order).amount_minor == 1201
    made = [
        _staff_refund(
            site,
            members,
            order,
            django_capture_on_commit_callbacks,
            kind="percentage",
            percentage=Decimal("33.33"),
        )
        for _ in range(4)
    ]
    # 33.33 % of 1,201 = 400.29… → 400 each; the fourth is the 1 yen left.
    assert [(r.status, r.amount_minor) for r in made] == [
        ("succeeded", 400),
        ("succeeded", 400),
        ("succeeded", 400),
        ("succeeded", 1),
    ]
    assert sdk.v1.charges.retrieve(charge_id).amount_refunded == 1201


def test_a_kwd_charge_synced_as_the_stores_total_is_corrected_to_what_stripe_charged(
    site, members, woo, woo_account, stripe_on, sdk, django_capture_on_commit_callbacks
):
    """Orders synced before the sync followed the gateway kept the store's KWD 10.125 as their
    charge: orders 0011 corrects them to Stripe's KWD 10.120, so a full refund goes through."""
    order, _placed, charge_id = _synced(
        site, woo, sdk, total="10.125", currency="KWD", charged_minor=10120
    )
    Charge.objects.filter(order=order).update(amount_minor=10125)  # as the old sync wrote it
    half = _staff_refund(
        site, members, order, django_capture_on_commit_callbacks, kind="amount",
        amount=Money(5000, "KWD"),
    )  # fmt: skip
    assert half.status == "succeeded"
    refused = _staff_refund(site, members, order, django_capture_on_commit_callbacks, kind="full")
    assert (refused.status, refused.amount_minor) == ("failed", 5125)  # off Stripe's step
    assert sdk.v1.charges.retrieve(charge_id).amount_refunded == 5000  # nothing sent
    # Another store order refunded beyond the corrected amount in Sill's books: left as it is.
    other, _, _ = _synced(site, woo, sdk, total="3.005", currency="KWD", charged_minor=3000)
    Charge.objects.filter(order=other).update(amount_minor=3005, amount_refunded_outside_minor=3005)

    migration = import_module("sill.orders.migrations.0011_woo_charges_as_stripe_charged")
    migration.charge_woo_orders_as_stripe_charged(django_apps, None)

    assert Charge.objects.get(order=order).amount_minor == 10120
    assert Charge.objects.get(order=other).amount_minor == 3005
    assert Order.objects.get(pk=order.pk).total == Money(10125, "KWD")  # the store's, as written
    rest = _staff_refund(site, members, order, django_capture_on_commit_callbacks, kind="full")
    assert (rest.status, rest.amount_minor) == ("succeeded", 5120), rest.failure_message
    assert sdk.v1.charges.retrieve(charge_id).amount_refunded == 10120
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_an_order_short_of_refunded_only_by_the_uncharged_fils_becomes_refunded(
    site, members, woo, woo_account, stripe_on, sdk, django_capture_on_commit_callbacks
):
    order, _placed, _charge_id = _synced(
        site, woo, sdk, total="10.125", currency="KWD", charged_minor=10120
    )
    Charge.objects.filter(order=order).update(amount_minor=10125)  # as the old sync wrote it
    made = _staff_refund(
        site, members, order, django_capture_on_commit_callbacks, kind="amount",
        amount=Money(10120, "KWD"),
    )  # fmt: skip
    assert made.status == "succeeded"
    assert Order.objects.get(pk=order.pk).status == "PARTIALLY_REFUNDED"  # 5 fils "left"

    migration = import_module("sill.orders.migrations.0011_woo_charges_as_stripe_charged")
    migration.charge_woo_orders_as_stripe_charged(django_apps, None)

    assert Order.objects.get(pk=order.pk).status == "REFUNDED"
    assert Charge.objects.get(order=order).remaining == Money(0, "KWD")
