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
    [line] = _log_lines(caplog)
    assert line.startswith("refund re_odd of charge") and "DataError" in line
    assert f"charge {charge.pk} of site {site.pk}" in line
