"""At decision time the Stripe rail's own figures count: a refund made in the Stripe
dashboard whose webhook has not arrived (or never will) is recorded before Sill decides.

Against localstripe through the real SDK; no webhook is delivered in these tests.
"""

from __future__ import annotations

import json

import pytest

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.quote import quote_refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import NotRefundable, create_staff_refund
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.base import RefundFacts
from tests.conftest import site_owner
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event
from tests.refunds.conftest import ORIGINAL, refund_intent

pytestmark = pytest.mark.django_db


def test_an_unreported_outside_refund_caps_the_agent_refund_and_counts_in_the_facts(
    site,
    paid,
    sdk,
    api,
    sign,
    deliver,
):
    outside = sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})

    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert (answer["decision"], answer["amount"]) == ("approved", "59.00"), answer
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.facts["refundFraction"] == {"num": 8900, "den": 8900}
    assert refund.status == "succeeded"
    assert sdk.v1.charges.retrieve(paid.provider_charge_id).amount_refunded == 8900

    recorded = ExternalRefund.objects.get()
    assert (recorded.provider_refund_id, recorded.counted_minor) == (outside.id, 3000)
    body = json.loads(AuditRecord.objects.get(kind="external_refund").payload)["body"]
    assert body["event_id"] == f"decision:{paid.pk}"
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (5900, 3000)
    assert Order.objects.get(pk=paid.order_id).status == "REFUNDED"

    # The webhook arriving late changes nothing: the refund is known by its provider id.
    late = event("refund.created", as_dict(outside), event_id="evt_late")
    assert deliver(site, late).status_code == 200
    paid.refresh_from_db()
    assert paid.amount_refunded_outside_minor == 3000
    assert ExternalRefund.objects.count() == 1


def test_a_charge_refunded_in_full_at_stripe_refuses_the_staff_refund(
    site,
    paid,
    sdk,
    members,
):
    sdk.v1.refunds.create(params={"charge": paid.provider_charge_id})
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=site_owner(site), name="Goodwill")
    order = Order.objects.get(pk=paid.order_id)
    with pytest.raises(NotRefundable, match=r"(?i)nothing is left to refund"):
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)
    assert paid.amount_refunded_outside_minor == 8900
    assert not Refund.objects.exists()


def test_sills_own_refunds_at_stripe_are_never_counted_as_outside(
    site,
    paid,
    sdk,
    api,
    sign,
):
    from decimal import Decimal

    first = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("20.00")))).json()
    assert Refund.objects.get(pk=first["refund_id"]).status == "succeeded", first
    ensure_default_reasons(site)
    charge = Charge.objects.get(pk=paid.pk)
    # Stripe counts Sill's own $20.00: nothing is unrecorded, nothing is listed as outside.
    quote = quote_refund(
        order=charge.order, charge=charge, rail_facts=RefundFacts(charge_refunded_minor=2000)
    )
    assert quote.remaining.amount_minor == 6900
    assert not ExternalRefund.objects.exists()


def test_the_quote_subtracts_what_the_rail_counts_beyond_sills_records(site, paid):
    # When the rail's refunds could not be listed, its figure still caps the refund.
    charge = Charge.objects.get(pk=paid.pk)
    assert quote_refund(order=charge.order, charge=charge).remaining.amount_minor == 8900
    capped = quote_refund(
        order=charge.order, charge=charge, rail_facts=RefundFacts(charge_refunded_minor=2500)
    )
    assert capped.remaining.amount_minor == 6400


def test_an_outside_refund_an_agent_decision_finds_waits_in_the_inbox(site, paid, sdk, api, sign):
    """The decision records the dashboard refund, and shows the merchant it had been missed:
    a reconciliation run afterwards finds the books in order, so only the decision can."""
    from refunds.models import ReconciliationItem

    outside = sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})
    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert (answer["decision"], answer["amount"]) == ("approved", "59.00"), answer
    [item] = ReconciliationItem.objects.filter(charge=paid)
    assert (item.kind, item.provider_refund_id, item.rail_amount_minor) == (
        "missing_in_sill", outside.id, 3000,
    )  # fmt: skip
    assert item.sill_corrected and item.resolved_at is None
    reconciled = AuditRecord.objects.filter(kind="reconciliation_found").count()
    assert reconciled == 1
