"""An agent decision that waited for its order's row lock reads the order as the lock holder
left it: the dispute it recorded, the agent refund it made, the refund it held.

The holder is another transaction that locks the order (as a webhook recording a dispute, or
another decision on the order, does), writes, and commits only once the decision is waiting
for the lock. What the holder wrote must count in the decision's quote, exactly as it would
had the decision come a moment later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from refunds.models import Decision, Refund, RefundOrigin, RefundStatus
from refunds.quote import charged_charge
from sill.orders.models import Dispute, DisputeStatus, Order
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import ORIGINAL, post, refund_intent
from tests.threads import OTHER_SESSIONS_HERE, ROW_LOCKS

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _someone_waits_for_a_row_lock() -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM pg_locks WHERE NOT granted AND {OTHER_SESSIONS_HERE}{ROW_LOCKS}"
            )
            if cursor.fetchone() is not None:
                return True
        time.sleep(0.01)
    return False


def _decide_while_order_locked(order: Order, write: Callable[[Order], None], body: bytes) -> Any:
    """Post ``body`` while another transaction holds ``order``'s row lock and runs ``write``;
    that transaction commits once the decision waits for the lock. The decision's response."""
    locked, release = threading.Event(), threading.Event()
    answer: list[Any] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                write(Order.objects.select_for_update().get(pk=order.pk))
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    def decide() -> None:
        try:
            answer.append(post(Client(), body))
        except Exception as exc:  # examined by the test
            answer.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(timeout=10)
    decision = threading.Thread(target=decide)
    decision.start()
    try:
        assert _someone_waits_for_a_row_lock(), "the decision never waited for the order"
    finally:
        release.set()
        holder.join(timeout=30)
        decision.join(timeout=60)
    (response,) = answer
    return response


def test_a_dispute_recorded_while_the_decision_waited_rejects_it(sign, original):
    charge = charged_charge(original)

    def dispute(order: Order) -> None:
        Dispute.objects.create(
            charge=charge, provider_dispute_id="dp_1", reason="fraudulent", amount_minor=8900,
            currency="USD", status=DisputeStatus.NEEDS_RESPONSE, opened_at=timezone.now(),
        )  # fmt: skip

    response = _decide_while_order_locked(original, dispute, sign(refund_intent(ORIGINAL)))

    assert not isinstance(response, Exception), response
    assert response.status_code == 201, response.content
    answer = response.json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "disputed"), answer
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0


def test_an_agent_refund_made_while_the_decision_waited_makes_it_already_executed(
    sign, original, agent, site
):
    charge = charged_charge(original)

    def agent_refund(order: Order) -> None:
        Refund.objects.create(
            site=site, order=order, charge=charge, origin=RefundOrigin.AGENT, agent=agent,
            amount_minor=1000, currency="USD", rail=charge.rail, decision=Decision.ESCALATED,
            status=RefundStatus.HELD,
        )  # fmt: skip

    body = sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00")))
    response = _decide_while_order_locked(original, agent_refund, body)

    # Not a 500 from the one-live-agent-refund-per-order constraint.
    assert not isinstance(response, Exception), response
    assert response.status_code == 201, response.content
    answer = response.json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "already_executed"), answer
    assert Refund.objects.filter(order=original, origin=RefundOrigin.AGENT).count() == 2
