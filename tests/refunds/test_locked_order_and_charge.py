"""``refunds.quote.locked_order_and_charge``: an agent decision's order and charge, locked and
read with the quote's checks in one statement on PostgreSQL, must answer what the two reads
it replaces answer (the order locked, then ``charged_charge(order, lock=True, checks=True)``)
and hold both rows' locks until the transaction ends."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from refunds.models import Refund, RefundStatus
from refunds.quote import charged_charge, locked_order_and_charge
from sill.orders.models import Charge, ChargeStatus, Dispute, DisputeStatus, Order
from sill.sql import Carried
from tests.refunds.conftest import ORIGINAL, hold_refund, post, refund_intent

pytestmark = pytest.mark.django_db

CHECKS = ("quote_disputed", "quote_agent_refund", "quote_held_minor", "quote_held_count")


def _answer(charge: Charge | None) -> tuple[object, ...] | None:
    if charge is None:
        return None
    values = tuple(getattr(charge, f.attname) for f in Charge._meta.concrete_fields)
    return (*values, *(getattr(charge, name) for name in CHECKS))


def _two_reads(site_id: str, order_id: str):
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(site_id=site_id, pk=order_id).first()
        charge = charged_charge(order, lock=True, checks=True) if order is not None else None
    return order, charge


def test_it_reads_the_first_successful_charge_with_the_quote_checks(order, site, members):
    first = Charge.objects.get(order=order)
    # A later successful charge, and a failed one earlier still: the earliest success counts.
    Charge.objects.create(
        order=order, rail=first.rail, provider_charge_id="ch_later", amount_minor=100,
        currency="USD", captured_at=timezone.now(), status=ChargeStatus.SUCCEEDED,
    )  # fmt: skip
    failed = Charge.objects.create(
        order=order, rail=first.rail, provider_charge_id="ch_failed", amount_minor=100,
        currency="USD", status=ChargeStatus.FAILED,
    )  # fmt: skip
    Charge.objects.filter(pk=failed.pk).update(created_at=first.created_at - timedelta(hours=1))
    # Held first: a staff refund is refused once the charge is disputed.
    for amount in (700, 300):
        hold_refund(order=order, requested_by=members["staff"].user, amount_minor=amount)
    Dispute.objects.create(
        charge=first, reason="fraudulent", amount_minor=500, currency="USD",
        status=DisputeStatus.NEEDS_RESPONSE, opened_at=timezone.now(),
    )  # fmt: skip

    with transaction.atomic():
        found, charge, selected = locked_order_and_charge(site.pk, order.pk)
    expected_order, expected_charge = _two_reads(site.pk, order.pk)

    assert found == expected_order and charge is not None and charge.pk == first.pk
    assert _answer(charge) == _answer(expected_charge)
    assert (charge.quote_disputed, charge.quote_held_minor, charge.quote_held_count) == (
        True,
        1000,
        2,
    )
    assert charge.order is found  # the quote reads the order through the charge: no query
    assert selected is None  # nothing else asked


def test_an_order_without_a_successful_charge_comes_without_one(make_order, site):
    unpaid = make_order(charged=False)
    with transaction.atomic():
        assert locked_order_and_charge(site.pk, unpaid.pk) == (unpaid, None, None)


def test_another_sites_order_is_not_found(order, other_site):
    with transaction.atomic():
        assert locked_order_and_charge(other_site.pk, order.pk) == (None, None, None)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_both_rows_stay_locked_until_the_transaction_ends(order, site):
    charge = Charge.objects.get(order=order)
    other = connection.get_new_connection(connection.get_connection_params())
    other.autocommit = True

    def locked(table: str, pk: str) -> bool:
        try:
            other.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR UPDATE NOWAIT', [pk])
        except psycopg.errors.LockNotAvailable:
            return True
        return False

    try:
        with transaction.atomic():
            locked_order_and_charge(site.pk, order.pk)
            assert locked("orders_order", order.pk)
            assert locked("orders_charge", charge.pk)
        assert not locked("orders_order", order.pk)
        assert not locked("orders_charge", charge.pk)
    finally:
        other.close()


def test_it_selects_what_the_caller_carries_on_postgresql_only(order, make_order, site):
    carried = [Carried("(SELECT %s::text || o.id)", ("order ",)), Carried("(SELECT %s)", (7,))]
    unpaid = make_order(charged=False)
    with transaction.atomic():
        _, charge, selected = locked_order_and_charge(site.pk, order.pk, also=carried)
        _, _, unpaid_selected = locked_order_and_charge(site.pk, unpaid.pk, also=carried)
    assert charge is not None and charge.quote_held_count == 0  # the checks end where they did
    if connection.vendor == "postgresql":
        assert (selected, unpaid_selected) == ((f"order {order.pk}", 7), (f"order {unpaid.pk}", 7))
    else:  # two statements of its own there, and nothing carried
        assert (selected, unpaid_selected) == (None, None)


def test_an_agent_decision_reads_its_refunds_today_with_the_order_lock(
    client, sign, agent, site, make_order, mock_rail, django_capture_on_commit_callbacks
):
    """The agent's sum comes with the order's lock on PostgreSQL: the decision's facts show
    the same total as the facts read on their own (every currency, live refunds only)."""
    for amount, currency, status in [
        (1000, "USD", RefundStatus.SUCCEEDED),
        (2000, "EUR", RefundStatus.HELD),  # 2000 EUR cents x 1.08 = 2160 US cents
        (5000, "USD", RefundStatus.REJECTED),  # refused: moved nothing
    ]:
        earlier = make_order(total="90.00", currency=currency)
        Refund.objects.create(
            site=site, order=earlier, charge=Charge.objects.get(order=earlier), origin="agent",
            agent=agent, amount_minor=amount, currency=currency, decision="approved",
            status=status,
        )  # fmt: skip
    original = make_order(total="10.00", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    statements: list[str] = []

    def record(execute, sql, params, many, context):  # every statement, as sent
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), django_capture_on_commit_callbacks():
        answer = post(client, sign(refund_intent(ORIGINAL)))
    assert answer.status_code == 201 and answer.json()["decision"] == "approved", answer.content
    refund = Refund.objects.get(order=original)
    assert refund.facts["refundAgentTotalTodayUsd"] == 1000 + 2160 + 1000
    apart = [s for s in statements if s.lstrip().startswith("SELECT t.currency")]
    assert len(apart) == (0 if connection.vendor == "postgresql" else 1)
