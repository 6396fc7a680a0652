"""Money moves at most once under concurrency (row locks + constraints; proven on PostgreSQL).

Each thread has its own database connection, so these run real concurrent transactions. On
SQLite they still pass (IMMEDIATE transactions serialise writers); the row-lock guarantee is
what PostgreSQL proves in CI.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from refunds.models import Refund
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import ORIGINAL, post, refund_intent
from tests.threads import run_concurrently

pytestmark = pytest.mark.django_db(transaction=True)


def test_twenty_concurrent_refund_mandates_make_exactly_one_refund(sign, original):
    bodies = [sign(refund_intent(ORIGINAL)) for _ in range(20)]
    responses = run_concurrently(20, lambda i: post(Client(), bodies[i]))
    assert all(not isinstance(r, Exception) for r in responses), responses
    answers = [r.json() for r in responses]
    assert all(r.status_code == 201 for r in responses), answers
    approved = [a for a in answers if a["decision"] == "approved"]
    rejected = [a for a in answers if a["decision"] == "rejected"]
    assert len(approved) == 1
    assert len(rejected) == 19 and {a["reason"] for a in rejected} == {"already_executed"}
    # Execution is enqueued on commit; eager mode runs it in the committing thread.
    refund = Refund.objects.get(pk=approved[0]["refund_id"])
    assert refund.status == "succeeded"
    charge = Charge.objects.get(order=original)
    assert charge.amount_refunded_minor == 8900 and charge.amount_reserved_minor == 0
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_concurrent_identical_sends_make_one_refund(sign, original):
    body = sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00")))
    responses = run_concurrently(8, lambda i: post(Client(), body))
    assert all(not isinstance(r, Exception) for r in responses), responses
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 7 + [201], [r.content for r in responses]
    assert len({r.json()["refund_id"] for r in responses}) == 1
    assert Refund.objects.count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert Charge.objects.get(order=original).amount_refunded_minor == 1000
