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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from audit.selectors import chain_verification, records_about
from refunds.models import Refund, RefundStatus
from refunds.reasons.services import ensure_default_reasons
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Order, OrderStatus
from sill.rails.models import MockLedgerEntry
from sill.rails.stripe_events import process_event
from sill.rails.stripe_webhooks import store_event
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event
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
