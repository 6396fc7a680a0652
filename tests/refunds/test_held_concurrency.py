"""Two admins deciding one held refund at the same moment (PostgreSQL row locks)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from audit.models import AuditRecord
from audit.selectors import chain_verification, records_about
from refunds.models import Refund
from refunds.review.decisions import AlreadyDecided, approve_refund, reject_refund
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import hold_refund
from tests.threads import row_locked_elsewhere

ROUNDS = 6


def race(*contenders: tuple[Callable[..., Refund], Any], refund_id: str) -> list[str]:
    """Run the decisions in threads released together; each answers "won" or "already"."""
    start = threading.Barrier(len(contenders))
    results: list[Any] = [None] * len(contenders)

    def work(i: int, decide: Callable[..., Refund], actor: Any) -> None:
        try:
            refund = Refund.objects.get(pk=refund_id)
            start.wait()
            decide(refund=refund, actor=actor)
            results[i] = "won"
        except AlreadyDecided:
            results[i] = "already"
        except BaseException as exc:  # reported by the main thread
            results[i] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=work, args=(i, decide, actor))
        for i, (decide, actor) in enumerate(contenders)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_approve_and_reject_make_exactly_one_outcome(
    needs_postgres, make_order, agent, mock_rail, members
):
    admin, owner = members["admin"].user, members["owner"].user
    for n in range(ROUNDS):
        refund = hold_refund(order=make_order(), agent=agent)
        contenders = [(approve_refund, admin), (reject_refund, owner)]
        if n % 2:
            contenders.reverse()
        results = race(*contenders, refund_id=refund.id)
        assert sorted(map(str, results)) == ["already", "won"], results

        refund.refresh_from_db()
        approved = results[[c[0] for c in contenders].index(approve_refund)] == "won"
        decisions = records_about(site=refund.site, refund_id=refund.id).filter(
            kind__in=["escalated_approved", "escalated_rejected"]
        )
        assert decisions.count() == 1
        if approved:
            assert refund.status == "succeeded"
            assert decisions.get().kind == "escalated_approved"
            assert MockLedgerEntry.objects.filter(metadata__sill_refund_id=refund.id).count() == 1
        else:
            assert (refund.status, refund.outcome_code) == ("rejected", "rejected_by_reviewer")
            assert decisions.get().kind == "escalated_rejected"
            assert not MockLedgerEntry.objects.filter(metadata__sill_refund_id=refund.id).exists()
            assert Charge.objects.get(pk=refund.charge_id).amount_reserved_minor == 0
    assert chain_verification(refund.site).ok


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_approvals_refund_once(
    needs_postgres, make_order, agent, mock_rail, members
):
    refund = hold_refund(order=make_order(), agent=agent)
    results = race(
        (approve_refund, members["admin"].user),
        (approve_refund, members["owner"].user),
        refund_id=refund.id,
    )
    assert sorted(map(str, results)) == ["already", "won"], results
    assert AuditRecord.objects.filter(kind="escalated_approved").count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    charge = Charge.objects.get(pk=refund.charge_id)
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (8900, 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("decide", [approve_refund, reject_refund], ids=["approve", "reject"])
def test_a_decision_that_waited_past_the_deadline_expires_the_refund(
    needs_postgres, make_order, agent, mock_rail, members, decide
):
    """The deadline is judged when the decision holds the refund's lock, not when it was
    asked: an approval that queued behind another transaction until after the 24 hours
    expires the refund instead of sending it to the rail. A rejection read the clock before
    the lock, so one that queued as long was recorded as a reviewer's rejection of a refund
    that had expired."""
    from datetime import timedelta

    from django.utils import timezone

    from refunds.review.decisions import DecisionRefused

    refund = hold_refund(order=make_order(), agent=agent)
    Refund.objects.filter(pk=refund.pk).update(expires_at=timezone.now() + timedelta(seconds=1))
    # The deadline passes while the decision waits for the lock.
    with (
        row_locked_elsewhere(Refund, refund.pk, release_after=2.0),
        pytest.raises(DecisionRefused) as refused,
    ):
        decide(refund=Refund.objects.get(pk=refund.pk), actor=members["admin"].user)
    assert refused.value.code == "expired"
    assert Refund.objects.get(pk=refund.pk).status == "expired"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
