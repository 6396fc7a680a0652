"""An owner's resolution of a refund that needs attention takes its row locks in the order
every refund path takes them: the money rows first, the site's audit chain head last.

The other transaction here does what a staff refund or a settlement of another refund of the
same order does: it holds the charge, then appends to the site's audit chain. A resolution
that appended first and asked for the charge after would deadlock with it, and the owner's
form would answer a 500.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from django.db import connection

from refunds.models import Refund
from refunds.reconcile.attention import resolve_attention
from sill.orders.models import Charge

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _someone_waits_for_a_row_lock(raw: psycopg.Connection) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if raw.execute(
            "SELECT 1 FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid() "
            "AND locktype IN ('transactionid', 'tuple')"
        ).fetchone():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def in_doubt(make_order, mock_rail, staff_refund, settings):
    """A $30.00 staff refund that needs attention: its amount is reserved on the charge."""
    order = make_order(total="30.00")
    mock_rail.config = {"refund": "timeout", "fail_times": 1}
    mock_rail.save()
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1  # the timeout leaves it in doubt at once
    refund = staff_refund(order)  # executed on commit (a transactional test)
    refund = Refund.objects.select_related("site").get(pk=refund.pk)
    assert refund.status == "needs_attention"
    return refund


def test_recording_no_refund_never_deadlocks_with_a_refund_of_the_same_charge(
    in_doubt, members, site
):
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcome: list[object] = []

    def resolve() -> None:
        try:
            outcome.append(
                resolve_attention(
                    refund=in_doubt, actor=members["owner"].user, outcome="not_refunded"
                )
            )
        except Exception as exc:  # examined below
            outcome.append(exc)
        finally:
            connection.close()

    try:
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            raw.execute("SET deadlock_timeout = '30s'")  # the resolution detects a deadlock
        raw.execute("BEGIN")
        raw.execute("SELECT 1 FROM orders_charge WHERE id = %s FOR UPDATE", [in_doubt.charge_id])
        resolving = threading.Thread(target=resolve)
        resolving.start()
        assert _someone_waits_for_a_row_lock(raw)
        # What a decision's or a settlement's audit append takes once it holds the charge.
        raw.execute("SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site.pk])
        raw.execute("COMMIT")
        resolving.join(timeout=60)
    finally:
        raw.close()

    (resolved,) = outcome
    assert isinstance(resolved, Refund), resolved
    assert (resolved.status, resolved.outcome_code) == ("failed", "not_at_rail")
    assert Charge.objects.get(pk=in_doubt.charge_id).amount_reserved_minor == 0
