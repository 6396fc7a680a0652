"""The rail's facts are read before Sill locks the order: a slow provider never holds a lock.

A loopback stand-in for Stripe probes, while it answers each request, whether the order's
row can be locked by someone else at that moment (``SELECT … FOR UPDATE NOWAIT``). It answers
404s in Stripe's error format, so the facts are simply unknown. PostgreSQL only: SQLite has
no row locks to probe.
"""

from __future__ import annotations

import json
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client

from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import create_staff_refund
from sill.orders.models import Order
from sill.rails.models import RailAccount
from tests.conftest import site_owner
from tests.rails.loopback import start_serving
from tests.refunds.conftest import post, refund_intent

pytestmark = pytest.mark.django_db(transaction=True)
ORIGINAL = "mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN"


@pytest.fixture
def probing_stripe(site):
    probes: list[str] = []
    state = {"order_pk": None}

    class Handler(BaseHTTPRequestHandler):
        def _probe_and_answer(self) -> None:
            if state["order_pk"] is not None and "/v1/refunds" not in self.path:
                try:
                    with transaction.atomic():
                        Order.objects.select_for_update(nowait=True).get(pk=state["order_pk"])
                    probes.append("free")
                except DatabaseError:
                    probes.append("locked")
                finally:
                    connection.close()
            body = json.dumps(
                {"error": {"type": "invalid_request_error", "message": "No such object"}}
            ).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _probe_and_answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    start_serving(server)
    account = RailAccount(
        site=site, rail="stripe", api_base=f"http://127.0.0.1:{server.server_port}"
    )
    account.set_secret("sk_test_probe_0001")
    account.save()
    yield probes, state
    server.shutdown()


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("row locks are a PostgreSQL matter (CI runs this on PostgreSQL)")


def test_agent_refund_facts_are_read_before_the_order_is_locked(
    probing_stripe, make_order, agent, sign
):
    probes, state = probing_stripe
    order = make_order(rail="stripe", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    state["order_pk"] = order.pk
    response = post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00"))))
    assert response.status_code == 201, response.content
    assert probes and set(probes) == {"free"}, probes


def test_staff_refund_facts_are_read_before_the_order_is_locked(
    probing_stripe, make_order, site, members
):
    probes, state = probing_stripe
    order = make_order(rail="stripe")
    state["order_pk"] = order.pk
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=site_owner(site), name="Goodwill")
    create_staff_refund(
        site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
    )
    assert probes and set(probes) == {"free"}, probes
