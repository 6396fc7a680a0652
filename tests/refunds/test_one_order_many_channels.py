"""Several channels acting on ONE order at the same moment never pay out twice, nor more than
was paid (PostgreSQL, real threads each with its own connection).

The channels: an agent's refund mandate, a staff refund from the order page, an owner
approving a held refund, the held-refund expiry sweep, a webhook reporting a refund made in
the Stripe dashboard, reconciliation of the charge, and an execution retried after its lease
lapsed. Pairs already raced elsewhere are not repeated here (agent with agent, staff with
staff: test_concurrency, test_staff_concurrency; approve with reject: test_held_concurrency;
webhook with reconciliation: test_reconcile_webhook_concurrency; two executions:
test_execution_leases).

Every test ends with the same books check (:func:`assert_books_agree`): what the rail holds
(the mock ledger, or localstripe's refunds of the charge) is what Sill counts, refunded by
Sill or outside it, never beyond the charge; nothing stays reserved; the order's status
follows; one signed decision record per refund, one settlement per settled refund; and the
site's audit chain verifies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.selectors import chain_verification, records_about
from policies.catalog import item_by_id
from policies.services import apply_catalog_item
from refunds.execution import execute_refund
from refunds.models import Refund, RefundStatus
from refunds.reasons.services import ensure_default_reasons
from refunds.review.decisions import approve_refund, expire_held_refunds
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order, OrderStatus
from sill.rails.models import MockLedgerEntry
from sill.rails.stripe_events import process_event
from sill.rails.stripe_webhooks import store_event
from tests.conftest import site_owner
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event
from tests.refunds.conftest import ORIGINAL, post, refund_intent, signed_body
from tests.refunds.test_reconcile_localstripe import KEY, account, charged, sdk  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DECISION_KINDS = ("approved", "escalated", "rejected")
CLOSING_KINDS = ("escalated_approved", "escalated_rejected")
RESERVED = (RefundStatus.PROCESSING, RefundStatus.NEEDS_ATTENTION)


def race(*work: Callable[[], object]) -> list[object]:
    """Run each callable in its own thread, released together; results (or exceptions)."""
    start = threading.Barrier(len(work))
    results: list[object] = [None] * len(work)

    def run(i: int) -> None:
        try:
            start.wait(timeout=30)
            results[i] = work[i]()
        except BaseException as exc:  # examined by the caller
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def in_another_thread(step: Callable[[], object]) -> object:
    """Run ``step`` on its own connection (another worker or request) and wait for it."""
    done: list[object] = []

    def run() -> None:
        try:
            done.append(step())
        except BaseException as exc:  # returned to the caller
            done.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    (result,) = done
    return result


@contextmanager
def meanwhile(
    statement: Callable[[str], bool], step: Callable[[], object]
) -> Iterator[list[object]]:
    """Just before this thread's first statement that ``statement`` matches, ``step`` runs to
    its end in another thread (its result, or exception, is yielded in the list)."""
    seen: list[object] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if not seen and statement(sql):
            seen.append(in_another_thread(step))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen
    assert seen, "the statement never ran"


def claiming(sql: str) -> bool:
    """The execution's claim of its lease: the worker has picked the refund up."""
    return sql.startswith('UPDATE "refunds_refund"') and '"lease_token" =' in sql


def unexpected(results: list[object]) -> list[object]:
    """The outcomes that are neither a result nor one of Sill's refusals (a 500, a deadlock)."""
    return [r for r in results if isinstance(r, BaseException) and not isinstance(r, SillError)]


def assert_books_agree(order: Order, *, at_rail_minor: int) -> Charge:
    """What the rail holds (``at_rail_minor``: Sill's refunds and outside ones) is what Sill
    counts, never beyond the charge; nothing reserved; the order's status follows; one signed
    record per decision, per review and per settlement; the audit chain verifies."""
    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    assert at_rail_minor <= charge.amount_minor, "more refunded at the rail than was paid"
    counted = charge.amount_refunded_minor + charge.amount_refunded_outside_minor
    assert (counted, charge.amount_reserved_minor) == (at_rail_minor, 0)
    refunds = list(Refund.objects.filter(order=order))
    assert not [r for r in refunds if r.status in RESERVED], refunds
    settled = sum(r.amount_minor for r in refunds if r.status == RefundStatus.SUCCEEDED)
    assert settled == charge.amount_refunded_minor
    if counted >= charge.amount_minor:
        assert order.status == OrderStatus.REFUNDED
    else:
        assert order.status == (OrderStatus.PARTIALLY_REFUNDED if counted else OrderStatus.PAID)
    for refund in refunds:
        kinds = list(
            records_about(site=order.site, refund_id=refund.id).values_list("kind", flat=True)
        )
        assert sum(k in DECISION_KINDS for k in kinds) == 1, (refund.status, kinds)
        reviewed = refund.decision_hash and refund.decided_at is not None
        assert sum(k in CLOSING_KINDS for k in kinds) == (1 if reviewed else 0), kinds
        closed = refund.status in (RefundStatus.SUCCEEDED, RefundStatus.FAILED)
        assert kinds.count("settlement") == (1 if closed else 0), (refund.status, kinds)
    assert chain_verification(order.site).ok
    out = StringIO()
    call_command("audit", "verify", "--site", order.site.pk, stdout=out)
    assert "OK" in out.getvalue()
    return charge


def mock_refunded_minor() -> int:
    return sum(MockLedgerEntry.objects.filter(kind="refund").values_list("amount_minor", flat=True))


def stripe_refunded_minor(client: Any, charge: Charge) -> int:
    """What localstripe holds refunded of ``charge`` (Sill's refunds and outside ones)."""
    listed = client.v1.refunds.list(params={"charge": charge.provider_charge_id, "limit": 100})
    return sum(r.amount for r in listed.data if r.status in ("succeeded", "pending"))


# --- Stripe: a dashboard refund, its webhook and reconciliation, beside Sill's refund -----------


def _dashboard_refund(
    client: Any, stripe_account: Any, charge: Charge, amount_minor: int, name: str
) -> str:
    """A refund made in the Stripe dashboard, and its webhook stored and processed."""
    made = as_dict(
        client.v1.refunds.create(
            params={"charge": charge.provider_charge_id, "amount": amount_minor}
        )
    )
    stored = store_event(
        account=stripe_account, payload=event("refund.created", made, event_id=name)
    )
    assert stored is not None
    return process_event(stored.pk)


def _staff_refund(site: Any, members: Any, order: Order, amount_minor: int | None) -> Refund:
    """A staff member's refund of ``order`` (everything left when ``amount_minor`` is None)."""
    ensure_default_reasons(site)
    reason = site.refund_reasons.filter(active=True, code="defective").first()
    return create_staff_refund(
        site=site, order=order, actor=members["staff"].user,
        kind="full" if amount_minor is None else "amount",
        amount=None if amount_minor is None else Money(amount_minor, order.currency),
        reason=reason,
    )  # fmt: skip


def test_a_dashboard_refund_reported_before_sills_rail_call_stops_sills_refund(
    site,
    members,
    account,  # noqa: F811 (a fixture)
    charged,  # noqa: F811 (a fixture)
    sdk,  # noqa: F811 (a fixture)
):
    """Sill reserved $30.00 of a $40.00 charge; as its worker picks the refund up, $20.00 is
    refunded in the Stripe dashboard and its webhook recorded. Only $20.00 is left, less than
    Sill's $30.00: Sill must not send it (a rail that does not refuse it would hold $50.00
    refunded of $40.00); the refund fails ``exceeds_refundable`` and its reservation is
    released."""
    charge = charged("40.00")
    with meanwhile(
        claiming, lambda: _dashboard_refund(sdk, account, charge, 2000, "evt_dash")
    ) as webhook:
        refund = _staff_refund(site, members, charge.order, 3000)  # executed on commit
    assert "external refund recorded" in str(webhook[0])

    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "exceeds_refundable")
    assert_books_agree(charge.order, at_rail_minor=stripe_refunded_minor(sdk, charge))


# --- the mock rail: an agent, staff, an owner's approval, the expiry sweep, a lapsed lease ------


def _holding_staff_refunds_over_40(site: Any) -> None:
    """The site's rules hold every refund over $40.00 for an owner or admin."""
    item = item_by_id("conservative")
    assert item is not None
    apply_catalog_item(
        site=site, actor=site_owner(site), item=item, params={"holdOverUsd": "40.00"}
    )


def _agent_asks(site: Any, agent: Any, max_amount: str) -> Any:
    body = signed_body(
        refund_intent(ORIGINAL, max_amount=Decimal(max_amount)),
        site_id=site.id,
        agent_id=agent.agent_id,
    )
    return post(Client(), body)


def test_an_agent_staff_and_an_owners_approval_at_once_never_pay_beyond_the_charge(
    site, members, agent, agent_key, original
):
    """A $45.00 staff refund of the $89.00 order waits for approval. At the same moment the
    owner approves it, the agent asks for $30.00, a staff member asks for everything left and
    another for $20.00: whatever order the row locks give them, the mock rail pays at most
    $89.00 and Sill's books say what it paid."""
    _holding_staff_refunds_over_40(site)
    held = _staff_refund(site, members, original, 4500)
    assert held.status == RefundStatus.HELD

    results = race(
        lambda: approve_refund(refund=Refund.objects.get(pk=held.pk), actor=members["owner"].user),
        lambda: _agent_asks(site, agent, "30.00"),
        lambda: _staff_refund(site, members, original, None),
        lambda: _staff_refund(site, members, original, 2000),
    )
    assert not unexpected(results), results
    assert results[1].status_code == 201, results[1].content  # type: ignore[union-attr]
    held.refresh_from_db()
    assert held.status == RefundStatus.SUCCEEDED, results
    charge = assert_books_agree(original, at_rail_minor=mock_refunded_minor())
    assert charge.amount_refunded_minor >= 4500  # the approval is paid whatever came first


def test_the_expiry_sweep_an_approval_and_staff_at_the_deadline_make_one_outcome(
    site, members, agent, agent_key, original
):
    """The held $45.00 refund's 24 hours run out as the owner approves it, while the sweep
    runs and staff refund the rest: it is approved or expired (one record either way), never
    both, and what the rail paid is what Sill counts."""
    _holding_staff_refunds_over_40(site)
    held = _staff_refund(site, members, original, 4500)
    deadline = held.expires_at
    assert deadline is not None

    results = race(
        lambda: approve_refund(
            refund=Refund.objects.get(pk=held.pk),
            actor=members["owner"].user,
            now=deadline - timedelta(milliseconds=1),
        ),
        lambda: expire_held_refunds(now=deadline),
        lambda: _staff_refund(site, members, original, None),
        lambda: _agent_asks(site, agent, "89.00"),
    )
    assert not unexpected(results), results
    held.refresh_from_db()
    assert held.status in (RefundStatus.SUCCEEDED, RefundStatus.EXPIRED), held.status
    assert (results[1] == 1) == (held.status == RefundStatus.EXPIRED), results
    kinds = list(records_about(site=site, refund_id=held.id).values_list("kind", flat=True))
    assert sum(k in CLOSING_KINDS for k in kinds) == 1, kinds
    assert_books_agree(original, at_rail_minor=mock_refunded_minor())


def test_an_execution_retried_after_its_lease_lapsed_beside_staff_and_agent_pays_once(
    site, members, agent, agent_key, original, mock_rail
):
    """Worker A sends a $50.00 staff refund; its rail call stalls past its lease and the
    recovery's worker B takes the refund over, while a staff member and the agent ask for
    everything left of the $89.00 order. The $50.00 is paid once (B finds it by its key, A
    records that it lost the lease), the others share what is left, and nothing more."""
    mock_rail.config = {"delay_seconds": 1}
    mock_rail.save()
    outcomes: dict[str, object] = {}

    def when_the_rail_has_it() -> None:
        deadline = time.monotonic() + 20
        while not MockLedgerEntry.objects.filter(kind="refund").exists():
            assert time.monotonic() < deadline, "A never reached the rail"
            time.sleep(0.02)
        first = Refund.objects.get(order=original)
        Refund.objects.filter(pk=first.pk).update(lease_until=timezone.now() - timedelta(1))
        outcomes["race"] = race(
            lambda: execute_refund(first.id),
            lambda: _staff_refund(site, members, original, None),
            lambda: _agent_asks(site, agent, "89.00"),
        )

    watcher = threading.Thread(target=lambda: _closing(when_the_rail_has_it))
    watcher.start()
    first = _staff_refund(site, members, original, 5000)  # A executes it on commit
    watcher.join(timeout=120)

    results = outcomes["race"]
    assert isinstance(results, list) and not unexpected(results), outcomes
    first.refresh_from_db()
    assert first.status == RefundStatus.SUCCEEDED
    assert MockLedgerEntry.objects.filter(metadata__sill_refund_id=first.id).count() == 1
    assert_books_agree(original, at_rail_minor=mock_refunded_minor())


def test_the_expiry_sweep_and_staff_refunds_of_the_order_never_deadlock(site, members, original):
    """The sweep expires a held refund while staff refund the same order, lined up at the worst
    moment: a first staff refund's record takes the chain head just before the sweep's (so the
    sweep writes its refund again, and PostgreSQL checks that row's link to the charge at
    commit), and a second one holds the order's charge, waiting for the head the sweep holds.
    The sweep took the charge only at its commit, after the head: a deadlock, one of the two
    rolled back with a database error. It now takes the order and the charge before the head
    (refund, order, charge, head: the lock order of every decision)."""
    _holding_staff_refunds_over_40(site)
    held = _staff_refund(site, members, original, 4500)
    assert held.expires_at is not None
    heads, second = [0], threading.Event()
    at_head, sweep_has_head = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    def appending(sql: str) -> bool:
        return sql.startswith('WITH "won" AS (UPDATE "audit_auditchainhead"')

    def second_staff_refund() -> None:
        def hold_at_head(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            if appending(sql) and not at_head.is_set():
                at_head.set()  # holding the order and its charge
                sweep_has_head.wait(timeout=10)
            return execute(sql, params, many, context)

        try:
            with connection.execute_wrapper(hold_at_head):
                outcomes["second"] = _staff_refund(site, members, original, 1000)
        except BaseException as exc:  # examined below
            outcomes["second"] = exc
        finally:
            at_head.set()
            connection.close()

    def first_staff_refund() -> None:
        try:
            outcomes["first"] = _staff_refund(site, members, original, 1000)
        except BaseException as exc:  # examined below
            outcomes["first"] = exc
        finally:
            connection.close()

    threads: list[threading.Thread] = []

    def sweep_wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if not appending(sql):
            return execute(sql, params, many, context)
        heads[0] += 1
        if heads[0] == 1:
            # The first staff refund appends before the sweep's record takes the head (if it
            # can: it may be waiting for a lock the sweep holds).
            threads.append(threading.Thread(target=first_staff_refund))
            threads[-1].start()
            threads[-1].join(timeout=3)
        elif heads[0] == 2 and not second.is_set():
            second.set()
            threads.append(threading.Thread(target=second_staff_refund))
            threads[-1].start()
            at_head.wait(timeout=10)
        try:
            return execute(sql, params, many, context)
        finally:
            if heads[0] >= 2:  # the sweep's record took the head: the second may ask for it
                sweep_has_head.set()

    try:
        with connection.execute_wrapper(sweep_wrapper):
            outcomes["sweep"] = expire_held_refunds(now=held.expires_at)
    except BaseException as exc:  # examined below
        outcomes["sweep"] = exc
    finally:
        sweep_has_head.set()
        for thread in threads:
            thread.join(timeout=60)

    assert not unexpected(list(outcomes.values())), outcomes
    assert outcomes["sweep"] == 1
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("expired", "expired")
    assert_books_agree(original, at_rail_minor=mock_refunded_minor())


def _closing(step: Callable[[], object]) -> None:
    try:
        step()
    finally:
        connection.close()
