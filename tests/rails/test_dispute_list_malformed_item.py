"""One dispute of odd shape in a rail's list never hides the charge's other disputes.

Each dispute recorded refuses refunds of its charge, so the sync reads every one it can. One
that cannot be saved was already logged and skipped (sill.rails.charge_sync); these are the
parse stage's: a field of another shape raised while the rail's list was read, before any
dispute of the charge was recorded, and refunds of the disputed charge were not refused.

PayPal through its loopback stub (tests/rails/paypal_stub.py); Stripe through a loopback
Stripe driven by the real SDK (tests/rails/stripe_events_stub.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from refunds.reconcile.inbox import catch_up_charge
from sill.orders.models import Charge, Dispute
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.registry import rail_from_account
from tests.rails.stripe_events import dispute_obj, stripe_account
from tests.rails.stripe_events_stub import EventsStub, serving_events_stub
from tests.rails.test_paypal_webhooks import (
    deliver,
    dispute_event,
    own_counters,  # noqa: F401 (autouse)
)

pytestmark = pytest.mark.django_db


def test_a_paypal_dispute_whose_outcome_is_of_another_shape_hides_no_other(
    site, paypal, paypal_account, paypal_order
):
    # A resolved dispute's outcome, read from its details, as a string: reading it raised
    # (AttributeError), and the capture's open dispute listed beside it was never recorded.
    order, capture = paypal_order()
    odd = paypal.add_dispute(capture, status="RESOLVED")
    odd["dispute_outcome"] = "RESOLVED_BUYER_FAVOUR"
    paypal.put_dispute(odd)
    still_open = paypal.add_dispute(capture, status="OPEN")
    charge = order.charges.get()
    assert catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="t")
    recorded = {d.provider_dispute_id: d.status for d in Dispute.objects.filter(charge=charge)}
    # Resolved, who won unknown: lost, as a resolved dispute without an outcome is.
    assert recorded == {odd["dispute_id"]: "lost", still_open["dispute_id"]: "needs_response"}


def test_a_paypal_dispute_listed_without_an_id_counts_the_disputes_not_all_read(
    site, paypal, paypal_account, paypal_order, caplog
):
    # Seen before: left out without a word, and the disputes counted as all read, so a
    # decision could take Sill's list (without it) over the rail's own "disputed".
    order, capture = paypal_order()
    odd = paypal.add_dispute(capture, status="OPEN")
    paypal.disputes[odd.pop("dispute_id")] = odd
    still_open = paypal.add_dispute(capture, status="OPEN")
    charge = order.charges.get()
    with caplog.at_level(logging.WARNING, logger="sill.rails.charge_sync"):
        read = catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="t")
    assert read is False
    assert [d.provider_dispute_id for d in Dispute.objects.filter(charge=charge)] == [
        still_open["dispute_id"]
    ]
    [line] = [r.getMessage() for r in caplog.records if r.name == "sill.rails.charge_sync"]
    assert (
        line
        == f"a dispute of charge {charge.pk} of site {site.pk} has no id at the rail: not recorded"
    )


def test_a_paypal_dispute_event_whose_outcome_is_of_another_shape_is_recorded(
    site, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    # Raised on every attempt until the retries gave up: the dispute was never recorded.
    order, capture = paypal_order()
    event = dispute_event(paypal, capture, kind="RESOLVED", status="RESOLVED", held=False)
    event["resource"]["dispute_outcome"] = ["RESOLVED_BUYER_FAVOUR"]
    paypal.put_dispute(event["resource"])
    with django_capture_on_commit_callbacks(execute=True):
        assert deliver(site, paypal, event).status_code == 200
    stored = WebhookEvent.objects.get(site=site, rail="paypal")
    assert stored.processed_at is not None and stored.last_error == ""
    dispute = Dispute.objects.get(charge__order=order)
    assert (dispute.status, dispute.rail_status) == ("lost", "RESOLVED")


@pytest.fixture
def events_stub() -> Iterator[EventsStub]:
    with serving_events_stub() as stub:
        yield stub


@pytest.fixture
def stripe_charge(site, make_order, events_stub: EventsStub) -> Charge:
    stripe_account(site, api_base=events_stub.url)
    return Charge.objects.get(order=make_order(total="89.00", rail="stripe"))


@pytest.mark.parametrize(
    "odd",
    # None: the field is left out.
    [{"id": None}, {"created": "yesterday"}, {"created": None}, {"status": None}],
    ids=["no-id", "created-a-word", "no-created", "no-status"],
)
def test_a_stripe_dispute_of_another_shape_hides_no_other(
    site, stripe_charge, events_stub: EventsStub, odd: dict[str, Any]
):
    # Each raised while Stripe's list was read (AttributeError, ValueError, TypeError), and
    # the dispute listed after it was never recorded.
    listed = {**dispute_obj(stripe_charge.provider_charge_id, dispute_id="dp_odd"), **odd}
    events_stub.disputes += [
        {key: value for key, value in listed.items() if value is not None},
        dispute_obj(stripe_charge.provider_charge_id, dispute_id="dp_readable"),
    ]
    account = RailAccount.objects.get(site=site, rail="stripe")
    read = catch_up_charge(charge=stripe_charge, rail=rail_from_account(account), event_id="t")
    recorded = {d.provider_dispute_id: d for d in Dispute.objects.filter(charge=stripe_charge)}
    assert recorded["dp_readable"].status == "needs_response"
    # One without an id has nothing to be recorded under, and the disputes count as not all
    # read; the others are recorded, open.
    assert read is ("id" not in odd)
    assert set(recorded) == ({"dp_readable"} if "id" in odd else {"dp_odd", "dp_readable"})
    assert all(d.status == "needs_response" for d in recorded.values())


@pytest.mark.parametrize(
    ("field", "odd"),
    [("reason", {"code": "FRAUD"}), ("reason", 5), ("status", ["OPEN"]), ("status", 7),
     ("create_time", 5)],
    ids=["reason-an-object", "reason-a-number", "status-a-list", "status-a-number",
         "created-a-number"],
)  # fmt: skip
def test_a_paypal_dispute_field_of_another_shape_is_read_as_not_said(
    site, paypal, paypal_account, paypal_order, field: str, odd: Any
):
    # Seen before: the field's Python text was recorded as PayPal's word ("{'code': 'FRAUD'}"
    # as the reason the refusal names, "['OPEN']" as its status at PayPal). Now it reads as
    # PayPal not saying: reason "general", status OPEN (needs a response, refusing refunds).
    order, capture = paypal_order()
    listed = paypal.add_dispute(capture, status="OPEN")
    listed[field] = odd
    paypal.put_dispute(listed)
    charge = order.charges.get()
    assert catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="t")
    dispute = Dispute.objects.get(charge=charge)
    reason = "general" if field == "reason" else "MERCHANDISE_OR_SERVICE_NOT_RECEIVED"
    assert (dispute.status, dispute.rail_status, dispute.reason) == (
        "needs_response", "OPEN", reason,
    )  # fmt: skip
