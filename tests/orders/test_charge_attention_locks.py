"""An owner's resolution of a charge that needs attention takes its locks in the order every
money path takes them: the order, then the charge, the site's audit chain head last.

The other transaction here holds the order, then appends to the site's audit chain, as a
refund of the order or a sync of it does. A resolution that appended first and asked for the
order after would deadlock with it, and the owner's form would answer a 500.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from django.db import connection

from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.models import Charge, Order
from tests.orders.in_doubt import charge_in_doubt

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


def test_recording_a_charge_never_deadlocks_with_a_writer_of_the_same_order(
    make_order, agent, members, site
):
    in_doubt = charge_in_doubt(make_order(status="PENDING", charged=False, placed_by_agent=agent))
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    outcome: list[object] = []

    def resolve() -> None:
        try:
            outcome.append(
                resolve_charge_attention(
                    charge=in_doubt,
                    actor=members["owner"].user,
                    outcome="charged",
                    provider_charge_id="mock_ch_seen",
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
        raw.execute("SELECT 1 FROM orders_order WHERE id = %s FOR UPDATE", [in_doubt.order_id])
        resolving = threading.Thread(target=resolve)
        resolving.start()
        assert _someone_waits_for_a_row_lock(raw)
        # What an append takes once its transaction holds the order.
        raw.execute("SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site.pk])
        raw.execute("COMMIT")
        resolving.join(timeout=60)
    finally:
        raw.close()

    (resolved,) = outcome
    assert isinstance(resolved, Charge), resolved
    assert resolved.status == "succeeded"
    assert Order.objects.get(pk=in_doubt.order_id).status == "PAID"
