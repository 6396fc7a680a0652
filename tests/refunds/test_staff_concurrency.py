"""Concurrent staff refunds on one order never exceed what remains (PostgreSQL row locks).

Each thread has its own database connection and its own transaction, so these are real
concurrent requests: the order and charge row locks make them queue, and each one reads the
remaining amount only once it holds the locks.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from refunds.models import Refund
from refunds.staff.services import OrderSnapshot, create_staff_refund
from sill.errors import SillError
from sill.money import parse_major
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.test_staff_form_as_typed import _confirmation, _page_form
from tests.threads import run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _settled(order: Order) -> tuple[int, int, str]:
    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    return charge.amount_refunded_minor, charge.amount_reserved_minor, order.status


def test_twelve_concurrent_20_dollar_refunds_of_89_make_exactly_four(site, order, leaf, members):
    actor = members["staff"].user

    def work(i: int):
        return create_staff_refund(
            site=site,
            order=order,
            actor=actor,
            kind="amount",
            amount=parse_major("20.00", "USD"),
            reason=leaf,
            note=f"thread {i}",
        )

    results = run_concurrently(12, work)
    made = [r for r in results if isinstance(r, Refund)]
    refused = [r for r in results if isinstance(r, SillError)]
    assert len(made) == 4 and len(refused) == 8, results
    assert {e.code for e in refused} == {"exceeds_refundable"}
    assert all("At most $9.00 can be refunded" in e.message for e in refused)
    # Eager tasks ran each execution on its thread's commit.
    assert _settled(order) == (8000, 0, "PARTIALLY_REFUNDED")
    assert Refund.objects.filter(order=order, status="succeeded").count() == 4
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 4


def test_concurrent_full_and_percentage_refunds_never_exceed_the_total(site, order, leaf, members):
    actor = members["owner"].user
    kinds = [("full", None), ("percentage", "40"), ("percentage", "75"), ("full", None)] * 3

    def work(i: int):
        kind, pct = kinds[i]
        return create_staff_refund(
            site=site,
            order=order,
            actor=actor,
            kind=kind,
            percentage=Decimal(pct) if pct else None,
            reason=leaf,
            note="",
        )

    results = run_concurrently(len(kinds), work)
    made = [r for r in results if isinstance(r, Refund)]
    assert all(isinstance(r, Refund | SillError) for r in results), results
    assert sum(r.amount_minor for r in made) == 8900
    assert _settled(order) == (8900, 0, "REFUNDED")


def test_a_form_submitted_many_times_at_once_makes_one_refund(site, order, leaf, members):
    seen = OrderSnapshot(remaining_minor=8900, refund_count=0)

    def work(i: int):
        return create_staff_refund(
            site=site,
            order=order,
            actor=members["staff"].user,
            kind="amount",
            amount=parse_major("10.00", "USD"),
            reason=leaf,
            note="",
            expected=seen,
        )

    results = run_concurrently(8, work)
    assert sum(isinstance(r, Refund) for r in results) == 1, results
    assert {r.code for r in results if isinstance(r, SillError)} == {"order_changed"}
    assert _settled(order) == (1000, 0, "PARTIALLY_REFUNDED")


def test_concurrent_api_requests_never_exceed_the_remaining_amount(order, leaf, members):
    user = members["admin"].user

    def work(i: int):
        client = Client()
        client.force_login(user)
        return client.post(
            f"/api/order/{order.id}/refund",
            data={"amount": "30.00", "reasonId": leaf.pk},
            content_type="application/json",
        )

    responses = run_concurrently(6, work)
    codes = sorted(r.status_code for r in responses)
    assert codes == [201, 201, 400, 400, 400, 400], [r.content for r in responses]
    assert _settled(order) == (6000, 0, "PARTIALLY_REFUNDED")


def test_two_tabs_confirming_refunds_of_one_order_at_once_make_one(order, leaf, members):
    """Two browser tabs (two members, each form with its own key) confirm $50.00 of the
    $89.00 order and press Refund together: one refund, the other tab told in words."""
    tabs, confirmed = [], []
    for persona in ("staff", "admin"):
        client = Client()
        client.force_login(members[persona].user)
        form = {**_page_form(client, order), "reason": str(leaf.pk), "note": persona}
        asked = client.post(
            f"/orders/{order.id}/refund/", {**form, "kind": "amount", "amount": "50"}
        )
        assert asked.status_code == 200
        tabs.append(client)
        confirmed.append({**_confirmation(asked.content.decode()), "confirmed": "1"})

    responses = run_concurrently(
        2, lambda i: tabs[i].post(f"/orders/{order.id}/refund/", confirmed[i])
    )

    assert sorted(r.status_code for r in responses) == [303, 422], responses
    (refused,) = [r for r in responses if r.status_code == 422]
    body = refused.content.decode()
    assert "changed since you opened it" in body and 'name="amount" value="50"' in body
    assert Refund.objects.count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert _settled(order) == (5000, 0, "PARTIALLY_REFUNDED")
