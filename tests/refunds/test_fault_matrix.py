"""The fault matrix: a real worker SIGKILLed at each step of the money path, on the mock rail.

After every fault, Sill's books and the rail's agree: at most one rail refund per Sill refund,
the charge's refunded and reserved amounts match the refunds, ``audit verify`` passes, and a
second refund of money already returned is refused. The kill points are failpoints
(``sill.failpoints``) armed only in the first worker's environment.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from refunds.models import Refund
from refunds.tasks import recover_stuck_refunds_task
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import post, refund_intent
from tests.worker import (
    FAST_RECOVERY,
    lease_lapsed,
    recovered,
    running_worker,
    wait_for,
    worker_killed,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"


def assert_books_agree(order) -> None:
    """Sill's refunds of ``order`` and the mock rail's ledger tell the same story."""
    charge = Charge.objects.get(order=order)
    refunds = list(Refund.objects.filter(order=order))
    ledger = list(
        MockLedgerEntry.objects.filter(kind="refund", provider_charge_id=charge.provider_charge_id)
    )
    for refund in refunds:
        mine = [e for e in ledger if e.idempotency_key == refund.idempotency_key]
        assert len(mine) <= 1, f"{refund.id}: {len(mine)} rail refunds"
        if refund.status == "succeeded":
            assert len(mine) == 1 and mine[0].provider_id == refund.provider_refund_id
        if refund.status == "failed":
            assert mine == [], f"{refund.id} failed but the rail holds {mine}"
    succeeded = sum(r.amount_minor for r in refunds if r.status == "succeeded")
    reserved = sum(r.amount_minor for r in refunds if r.status in ("processing", "needs_attention"))
    assert (charge.amount_refunded_minor, charge.amount_reserved_minor) == (succeeded, reserved)
    assert sum(e.amount_minor for e in ledger) <= charge.amount_minor
    call_command("audit", "verify")


@pytest.mark.parametrize(
    ("failpoint", "rail_config", "rail_has_it_when_killed"),
    [
        ("before_rail_call=kill", {}, False),
        (None, {"delay_seconds": 30}, True),  # killed during a slow rail call, after it acted
        ("after_rail_call=kill", {}, True),
        ("in_settlement=kill", {}, True),
    ],
    ids=["before-the-rail-call", "during-the-rail-call", "after-the-rail-call", "in-settlement"],
)
def test_a_worker_killed_at_any_step_leaves_the_books_agreeing(
    tmp_path, sign, make_order, agent, mock_rail, failpoint, rail_config, rail_has_it_when_killed
):
    order = make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    mock_rail.config = rail_config
    mock_rail.save()
    refunded = MockLedgerEntry.objects.filter(kind="refund").exists
    with worker_killed(tmp_path / "first.log", failpoint=failpoint, rail_acted=refunded):
        body = post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
        assert body["decision"] == "approved"
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.status == "processing"  # Sill was not told; the money stays reserved
    assert MockLedgerEntry.objects.filter(kind="refund").exists() is rail_has_it_when_killed
    assert_books_agree(order)

    mock_rail.config = {}
    mock_rail.save()
    recovered(
        tmp_path / "second.log",
        lapsed=lambda: lease_lapsed(Refund.objects.filter(pk=refund.id)),
        sweep=recover_stuck_refunds_task,
        done=lambda: Refund.objects.get(pk=refund.id).status == "succeeded",
    )
    refund.refresh_from_db()
    assert refund.attempts >= 2
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert_books_agree(order)
    again = post(Client(), sign(refund_intent(ORIGINAL))).json()
    assert (again["decision"], again["reason"]) == ("rejected", "already_executed")
    assert_books_agree(order)


def test_lost_answer_then_rail_off_then_key_rejected_then_lease_taken_over(
    tmp_path, sign, make_order, agent, mock_rail
):
    """One refund through every non-crash fault in turn, by a real worker and the beat tasks."""
    from refunds.execution import claim
    from refunds.tasks import check_attention_refunds_task

    order = make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    # Every answer lost, and every lookup times out: the outcome stays unknown.
    mock_rail.config = {"refund": "timeout_after_effect", "lookup": "fail"}
    mock_rail.save()
    env = {
        **FAST_RECOVERY,
        "SILL_EXECUTION_MAX_ATTEMPTS": "2",
        "SILL_EXECUTION_BACKOFF_BASE_SECONDS": "0.1",
        "SILL_ATTENTION_RECHECK_SECONDS": "0",
    }
    with running_worker(tmp_path / "worker.log", **env):
        body = post(Client(), sign(refund_intent(ORIGINAL))).json()
        refund_id = body["refund_id"]
        wait_for(
            lambda: Refund.objects.get(pk=refund_id).status == "needs_attention",
            timeout=60,
            what="retries to run out",
        )
        assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
        assert_books_agree(order)

        mock_rail.enabled = False  # the owner switches the rail off
        mock_rail.save()
        Refund.objects.filter(pk=refund_id).update(failure_message="")
        check_attention_refunds_task.delay()
        wait_for(lambda: _checked(refund_id), timeout=30, what="a lookup on a disabled rail")
        assert Refund.objects.get(pk=refund_id).status == "needs_attention"
        assert_books_agree(order)

        mock_rail.enabled = True
        mock_rail.config = {"lookup": "reject"}  # the key is now rejected
        mock_rail.save()
        Refund.objects.filter(pk=refund_id).update(failure_message="")
        check_attention_refunds_task.delay()
        wait_for(lambda: _checked(refund_id), timeout=30, what="a refused lookup")
        assert Refund.objects.get(pk=refund_id).status == "needs_attention"
        assert_books_agree(order)

        mock_rail.config = {}
        mock_rail.save()
        token = claim(refund_id, status="needs_attention")  # another worker holds the lease
        assert token
        check_attention_refunds_task.delay()  # finds it leased: nothing happens
        Refund.objects.filter(pk=refund_id).update(lease_until=timezone.now())  # it lapses
        check_attention_refunds_task.delay()
        wait_for(
            lambda: Refund.objects.get(pk=refund_id).status == "succeeded",
            timeout=30,
            what="the lookup to settle it",
        )
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert_books_agree(order)
    again = post(Client(), sign(refund_intent(ORIGINAL))).json()
    assert (again["decision"], again["reason"]) == ("rejected", "already_executed")


def _checked(refund_id: str) -> bool:
    refund = Refund.objects.get(pk=refund_id)
    return bool(refund.failure_message) and refund.lease_until is None


def test_celery_retries_with_backoff_then_succeeds_in_a_real_worker(
    tmp_path, sign, make_order, agent, mock_rail
):
    order = make_order(placed_by_agent=agent, source_mandate_id=ORIGINAL)
    mock_rail.config = {"refund": "rate_limited", "fail_times": 2}
    mock_rail.save()
    env = {**FAST_RECOVERY, "SILL_EXECUTION_BACKOFF_BASE_SECONDS": "0.2"}
    with running_worker(tmp_path / "worker.log", **env):
        body = post(Client(), sign(refund_intent(ORIGINAL))).json()
        wait_for(
            lambda: Refund.objects.get(pk=body["refund_id"]).status == "succeeded",
            timeout=60,
            what="the retries",
        )
    log = (tmp_path / "worker.log").read_text()
    assert log.count("Retry in") >= 2  # Celery's own retry, with a countdown, twice
    refund = Refund.objects.get(pk=body["refund_id"])
    assert refund.attempts == 3
    assert_books_agree(order)
