"""An owner settles a purchase's charge that needs attention from what the rail's dashboard
shows: charged (with the rail's id) or not charged. A refusal changes nothing."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils.dateparse import parse_datetime

from audit.models import AuditRecord
from sill.errors import ExecutionInProgress, SillError
from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.charge_lease import claim_charge, release_charge
from sill.orders.charging import charge_order, stuck_charge_order_ids
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db


@pytest.fixture
def in_doubt(make_order, agent) -> Charge:
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )
    return charge_in_doubt(order)


@pytest.fixture
def owner(members) -> Any:
    return members["owner"].user


def resolved_bodies() -> list[dict[str, Any]]:
    return [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(kind="attention_resolved").order_by("seq")
    ]


def state(charge: Charge) -> tuple[Any, ...]:
    """Everything a resolution may change, as it stands."""
    fresh = Charge.objects.select_related("order").get(pk=charge.pk)
    return (
        fresh.status,
        fresh.provider_charge_id,
        fresh.provider_payment_id,
        fresh.failure_message,
        fresh.captured_at,
        fresh.attempts,
        fresh.lease_until,
        fresh.next_check_at,
        fresh.attention_since,
        fresh.order.status,
        AuditRecord.objects.count(),
    )


def test_it_records_the_charge_the_dashboard_shows(in_doubt, owner):
    made = MockLedgerEntry.objects.get(kind="charge")  # what the rail made, answer lost
    attempts = in_doubt.attempts

    charge = resolve_charge_attention(
        charge=in_doubt,
        actor=owner,
        outcome="charged",
        provider_charge_id=f"  {made.provider_charge_id} ",
        provider_payment_id=made.provider_id,
        note=" seen in the mock ledger ",
    )

    assert (charge.status, charge.provider_charge_id, charge.provider_payment_id) == (
        "succeeded",
        made.provider_charge_id,
        made.provider_id,
    )
    assert charge.captured_at is not None and charge.attempts == attempts
    assert (charge.lease_until, charge.next_check_at) == (None, None)
    assert charge.order.status == "PAID"
    (body,) = resolved_bodies()
    resolved_at = body.pop("resolved_at")
    assert parse_datetime(resolved_at) is not None
    order = charge.order
    assert body == {
        # Placed by make_order, not by a mandate Sill decided on: no decision to name.
        "decision_hash": None,
        "order_id": order.pk,
        "order_number": order.number,
        "charge_id": charge.pk,
        "mandate_id": "mnd_doubt",
        "amount_minor": 8900,
        "currency": "USD",
        "rail": "mock",
        "payment_account": "",  # the mock rail names none
        "provider_payment_id": made.provider_id,
        "provider_charge_id": made.provider_charge_id,
        "rail_status": "",
        "outcome": "charged",
        "code": "",
        "message": "",
        "attempts": attempts,
        "resolved_by": "owner@roasters.example",
        "resolution_note": "seen in the mock ledger",
    }
    record = AuditRecord.objects.get(kind="attention_resolved")
    assert record.subject_order_id == order.pk
    call_command("audit", "verify", stdout=io.StringIO())
    # Nothing is left for a worker or the sweep.
    assert charge_order(order_id=order.pk) == "done"
    assert order.pk not in stuck_charge_order_ids(older_than=timedelta())


def test_it_records_that_nothing_was_charged(in_doubt, owner):
    charge = resolve_charge_attention(charge=in_doubt, actor=owner, outcome="not_charged")

    order = charge.order
    assert (charge.status, order.status) == ("failed", "CANCELLED")
    assert charge.failure_message == (
        "owner@roasters.example recorded that Mock shows no charge for idempotency key "
        f"sill-charge-{order.pk}: nothing was charged, and the order is cancelled."
    )
    assert (charge.provider_charge_id, charge.lease_until, charge.next_check_at) == ("", None, None)
    (body,) = resolved_bodies()
    assert (body["outcome"], body["resolved_by"], body["resolution_note"]) == (
        "not_charged",
        "owner@roasters.example",
        None,
    )
    assert body["message"] == charge.failure_message
    call_command("audit", "verify", stdout=io.StringIO())


def test_only_the_charge_id_keeps_the_payment_the_rail_named(in_doubt, owner):
    # Stripe named the payment while it was unfinished (ChargePending): the charge holds it.
    Charge.objects.filter(pk=in_doubt.pk).update(provider_payment_id="pi_named")

    charge = resolve_charge_attention(
        charge=in_doubt, actor=owner, outcome="charged", provider_charge_id="ch_seen"
    )

    assert (charge.provider_charge_id, charge.provider_payment_id) == ("ch_seen", "pi_named")


def test_a_payment_id_alone_is_enough(in_doubt, owner):
    charge = resolve_charge_attention(
        charge=in_doubt, actor=owner, outcome="charged", provider_payment_id="mock_pi_seen"
    )
    assert (charge.status, charge.provider_charge_id, charge.provider_payment_id) == (
        "succeeded",
        "",
        "mock_pi_seen",
    )


@pytest.mark.parametrize(
    ("form", "field", "words"),
    [
        ({"outcome": ""}, "outcome", "Choose what"),
        ({"outcome": "refunded"}, "outcome", "Choose what"),
        ({"outcome": "charged"}, "provider_charge_id", "Enter the charge id"),
        ({"outcome": "charged", "provider_charge_id": "   "}, "provider_charge_id", "Enter"),
        ({"outcome": "charged", "provider_charge_id": "c" * 256}, "provider_charge_id", "long"),
        ({"outcome": "charged", "provider_payment_id": "p" * 256}, "provider_payment_id", "long"),
        ({"outcome": "charged", "provider_charge_id": "ch 1"}, "provider_charge_id", "an id"),
        ({"outcome": "charged", "provider_charge_id": "ch\x001"}, "provider_charge_id", "an id"),
        ({"outcome": "not_charged", "note": "n" * 1001}, "note", "note is too long"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(in_doubt, owner, form, field, words):
    before = state(in_doubt)
    with pytest.raises(SillError) as refused:
        resolve_charge_attention(charge=in_doubt, actor=owner, **form)
    assert (refused.value.code, refused.value.field) == ("invalid_field", field)
    assert words in refused.value.message
    assert state(in_doubt) == before


def test_a_charge_id_another_charge_of_the_site_holds_is_refused(in_doubt, owner, make_order):
    paid = make_order()  # its charge: ch_test_<order id> on the mock rail
    held = Charge.objects.get(order=paid).provider_charge_id
    before = state(in_doubt)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(
            charge=in_doubt, actor=owner, outcome="charged", provider_charge_id=held
        )

    assert (refused.value.code, refused.value.field) == ("invalid_field", "provider_charge_id")
    assert f"{held} is the charge of order #{paid.number}" in refused.value.message
    assert f"sill-charge-{in_doubt.order_id}" in refused.value.message
    assert state(in_doubt) == before


def test_an_id_another_sites_charge_holds_is_refused_without_naming_it(
    in_doubt, owner, make_order, other_site
):
    theirs = make_order(on_site=other_site)
    Charge.objects.filter(order=theirs).update(provider_charge_id="mock_ch_theirs")
    held = "mock_ch_theirs"
    before = state(in_doubt)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(
            charge=in_doubt, actor=owner, outcome="charged", provider_charge_id=held
        )

    assert refused.value.code == "invalid_field"
    assert "already recorded on another charge" in refused.value.message
    assert "order #" not in refused.value.message and theirs.pk not in refused.value.message
    assert state(in_doubt) == before


def test_a_payment_id_another_charge_holds_is_refused(in_doubt, owner, make_order):
    paid = make_order()
    Charge.objects.filter(order=paid).update(provider_payment_id="mock_pi_paid")
    before = state(in_doubt)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(
            charge=in_doubt, actor=owner, outcome="charged", provider_payment_id="mock_pi_paid"
        )

    assert (refused.value.code, refused.value.field) == ("invalid_field", "provider_payment_id")
    assert f"order #{paid.number}" in refused.value.message
    assert state(in_doubt) == before


def test_a_payment_id_other_than_the_one_the_rail_named_is_refused(in_doubt, owner):
    Charge.objects.filter(pk=in_doubt.pk).update(provider_payment_id="pi_named")
    before = state(in_doubt)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(
            charge=in_doubt,
            actor=owner,
            outcome="charged",
            provider_charge_id="ch_seen",
            provider_payment_id="pi_other",
        )

    assert (refused.value.code, refused.value.field) == ("invalid_field", "provider_payment_id")
    assert "pi_named" in refused.value.message
    assert state(in_doubt) == before


def test_it_is_refused_while_a_worker_holds_the_charge(in_doubt, owner):
    # The sweep's lookup claimed the charge and is asking the rail right now.
    token = claim_charge(in_doubt.pk)
    assert token is not None
    before = state(in_doubt)

    with pytest.raises(ExecutionInProgress) as refused:
        resolve_charge_attention(charge=in_doubt, actor=owner, outcome="not_charged")

    assert refused.value.code == "execution_in_progress" and refused.value.status == 409
    assert state(in_doubt) == before
    assert release_charge(in_doubt.pk, token)  # the worker still holds its lease


def test_it_is_refused_once_resolved(in_doubt, owner):
    resolve_charge_attention(charge=in_doubt, actor=owner, outcome="not_charged")
    before = state(in_doubt)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(
            charge=in_doubt, actor=owner, outcome="charged", provider_charge_id="ch_late"
        )

    assert refused.value.code == "already_resolved"
    assert state(in_doubt) == before
    assert len(resolved_bodies()) == 1


def test_a_charge_sill_is_still_trying_is_refused(make_order, agent, owner):
    # Pending, between two attempts: the rail may still answer; nobody is asked yet.
    order = make_order(status="PENDING", charged=False, placed_by_agent=agent)
    charge = Charge.objects.create(
        order=order, rail="mock", amount_minor=order.total_minor, currency="USD"
    )
    before = state(charge)

    with pytest.raises(SillError) as refused:
        resolve_charge_attention(charge=charge, actor=owner, outcome="not_charged")

    assert refused.value.code == "already_resolved"
    assert "does not need attention" in refused.value.message
    assert state(charge) == before
