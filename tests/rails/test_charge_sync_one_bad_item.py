"""One refund or dispute of a charge that Sill cannot read or record hides neither the others
nor itself: the others are recorded, it is logged (site, charge, the rail's id), and the
charge's sync says it did not read everything, so nothing reads the part as the whole.

Driven through the Stripe SDK against a loopback Stripe (tests/rails/stripe_facts_stub.py),
which can list an object Stripe would never send.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import F

from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.inbox import catch_up_charge
from refunds.reconcile.runs import run_reconciliation
from sill.orders.models import Charge, Dispute, ExternalRefund
from sill.rails.charge_sync import sync_charge
from sill.rails.models import RailAccount
from sill.rails.registry import rail_from_account
from tests.rails import stripe_facts_stub
from tests.rails.loopback import keepalive_server

pytestmark = pytest.mark.django_db

LOGGER = "sill.rails.charge_sync"


@pytest.fixture
def stripe(site) -> Iterator[tuple[stripe_facts_stub.StripeFactsStub, RailAccount]]:
    stub = stripe_facts_stub.StripeFactsStub()
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        account = RailAccount(site=site, rail="stripe", api_base=server.url, enabled=True)
        account.set_secret(stripe_facts_stub.KEY)
        account.save()
        yield stub, account


def _refund(charge: Charge, refund_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": refund_id, "object": "refund", "charge": charge.provider_charge_id,
        "amount": 1000, "currency": "usd", "status": "succeeded",
        "created": int(time.time()), "metadata": {}, **fields,
    }  # fmt: skip


def _dispute(charge: Charge, dispute_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": dispute_id, "object": "dispute", "charge": charge.provider_charge_id,
        "amount": 8900, "currency": "usd", "status": "needs_response", "reason": "fraudulent",
        "created": int(time.time()), **fields,
    }  # fmt: skip


def _log_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_refund_sill_cannot_record_is_logged_and_the_others_are_recorded(
    site, make_order, stripe, caplog
):
    # Seen before: one refund the books cannot hold for another reason than the charge's
    # amount (here a status word longer than Sill keeps: a DataError) ended the charge's sync:
    # the refunds listed after it, and its disputes, were never recorded.
    stub, account = stripe
    charge = make_order(rail="stripe").charges.get()
    stub.refunds += [
        _refund(charge, "re_odd", status="x" * 41),
        _refund(charge, "re_listed_after", amount=2000),
    ]
    stub.disputes.append(_dispute(charge, "dp_listed"))

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        synced = sync_charge(charge=charge, rail=rail_from_account(account), event_id="test")
    assert [r.provider_refund_id for r in ExternalRefund.objects.filter(charge=charge)] == [
        "re_listed_after"
    ]
    assert Charge.objects.get(pk=charge.pk).amount_refunded_outside_minor == 2000
    assert Dispute.objects.filter(charge=charge, provider_dispute_id="dp_listed").exists()
    # The sync says the charge's refunds were not all recorded; its disputes were.
    assert (synced.refunds_read, synced.disputes_read) == (False, True)
    assert "re_odd: not recorded: DataError" in synced.outcomes
    assert synced.refunds_not_recorded == ["re_odd"]
    [line] = _log_lines(caplog)
    assert line.startswith("refund re_odd of charge") and "DataError" in line
    assert f"charge {charge.pk} of site {site.pk}" in line


def test_a_refund_stripe_lists_unreadable_hides_neither_the_others_nor_itself(
    site, make_order, stripe, caplog
):
    # Seen before: a refund without an amount in Stripe's list made the whole charge
    # unreadable (AttributeError): the refund listed beside it was not recorded either.
    stub, account = stripe
    order = make_order(rail="stripe")
    charge = order.charges.get()
    # Sill settled a refund that Stripe lists in a shape Sill cannot read.
    own = Refund.objects.create(
        site=site, order=order, charge=charge, origin="staff", amount_minor=500,
        currency="USD", rail="stripe", decision="approved", status="succeeded",
        provider_refund_id="re_unreadable",
    )  # fmt: skip
    Charge.objects.filter(pk=charge.pk).update(
        amount_refunded_minor=F("amount_refunded_minor") + 500
    )
    unreadable = _refund(charge, "re_unreadable", metadata={"sill_refund_id": own.pk})
    del unreadable["amount"]
    stub.refunds += [unreadable, _refund(charge, "re_outside", amount=2000)]

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run = run_reconciliation(account_id=account.pk, force=True)
    assert isinstance(run, ReconciliationRun) and run.charges_checked == 1
    # The refund Stripe lists readably is recorded...
    outside = ExternalRefund.objects.get(charge=charge)
    assert (outside.provider_refund_id, outside.counted_minor) == ("re_outside", 2000)
    # ...and the charge counts as not read: its part of a list is never compared as the whole,
    # so Sill's own refund is not called missing at Stripe.
    assert run.charges_unreadable == 1
    assert not ReconciliationItem.objects.filter(refund=own).exists()
    [line] = _log_lines(caplog)
    assert line.startswith("refund re_unreadable (AttributeError) of charge")
    assert f"charge {charge.pk} of site {site.pk}" in line


def test_a_dispute_stripe_lists_without_an_amount_is_recorded_beside_the_others(
    site, make_order, stripe, caplog
):
    # Seen before: a dispute without an amount made the whole charge unreadable, so the open
    # dispute listed beside it was not recorded and did not refuse refunds of the charge. Both
    # are recorded now, the first with its amount not known (it refuses refunds all the same),
    # so Sill's list is the rail's whole list.
    stub, account = stripe
    charge = make_order(rail="stripe").charges.get()
    unreadable = _dispute(charge, "dp_unreadable")
    del unreadable["amount"]
    stub.disputes += [unreadable, _dispute(charge, "dp_open")]

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        disputes_read = catch_up_charge(
            charge=charge, rail=rail_from_account(account), event_id="decision:test"
        )
    recorded = dict(
        Dispute.objects.filter(charge=charge).values_list("provider_dispute_id", "amount_minor")
    )
    assert recorded.keys() == {"dp_unreadable", "dp_open"}
    assert recorded["dp_unreadable"] is None and recorded["dp_open"] is not None
    assert disputes_read is True
