"""Idempotency keys under real concurrency (PostgreSQL): one refund per key, whatever races.

Each thread has its own connection and transactions, as separate requests would.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from refunds.models import IdempotencyRecord, Refund
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry
from tests.threads import run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

KEY = "concurrent-key-1"


def _api(user, order, body: dict):
    client = Client()
    client.force_login(user)
    return client.post(
        f"/api/order/{order.id}/refund",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": KEY},
    )


def _refunded(order) -> int:
    return Charge.objects.get(order=order).amount_refunded_minor


class _OrderLock:
    """Holds the order's row lock in its own thread until released: a refund blocks on it."""

    def __init__(self, order: Order) -> None:
        self._taken = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(order.pk,))

    def _hold(self, pk: str) -> None:
        try:
            with transaction.atomic():
                Order.objects.select_for_update().get(pk=pk)
                self._taken.set()
                self._release.wait(30)
        finally:
            connection.close()

    def __enter__(self) -> _OrderLock:
        self._thread.start()
        assert self._taken.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join(30)


def _in_background(work) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["response"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_two_concurrent_form_submits_with_one_key_make_one_refund(order, leaf, members):
    user = members["staff"].user
    data = {
        "idempotency_key": KEY,
        "kind": "amount",
        "amount": "10.00",
        "reason": str(leaf.pk),
        "expected_remaining_minor": "",
        "expected_refund_count": "",
        "confirmed": "1",
    }

    def work(i: int):
        client = Client()
        client.force_login(user)
        return client.post(f"/orders/{order.id}/refund/", data)

    responses = run_concurrently(2, work)

    assert [r.status_code for r in responses] == [303, 303], responses
    assert Refund.objects.count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert _refunded(order) == 1000


def test_many_concurrent_api_requests_with_one_key_make_one_refund(order, leaf, members):
    user = members["admin"].user
    responses = run_concurrently(
        8, lambda i: _api(user, order, {"full": True, "reasonId": leaf.pk})
    )

    first = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r]
    others = [r for r in responses if r not in first]
    assert len(first) == 1, [(r.status_code, r.content) for r in responses]
    for r in others:
        replayed = r.status_code == 201 and r["Idempotent-Replayed"] == "true"
        in_flight = r.status_code == 409 and r.json()["error"]["code"] == "idempotency_in_flight"
        assert replayed or in_flight, r.content
        if replayed:
            assert r.content == first[0].content
    assert Refund.objects.count() == 1 and _refunded(order) == 8900


def test_a_request_waiting_for_a_lock_holds_its_key(order, leaf, members):
    user = members["staff"].user
    body = {"amount": "10.00", "reasonId": leaf.pk}
    with _OrderLock(order):
        thread, first = _in_background(lambda: _api(user, order, body))
        _wait_for(lambda: IdempotencyRecord.objects.filter(key=KEY).exists())

        second = _api(user, order, body)

        assert second.status_code == 409
        assert second.json()["error"]["code"] == "idempotency_in_flight"
    thread.join(30)

    assert first["response"].status_code == 201, first["response"].content
    replay = _api(user, order, body)
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert replay.content == first["response"].content
    assert Refund.objects.count() == 1 and _refunded(order) == 1000


def test_a_slow_request_whose_key_was_taken_over_makes_no_refund(order, leaf, members):
    user = members["staff"].user
    body = {"amount": "10.00", "reasonId": leaf.pk}
    with _OrderLock(order):
        slow, first = _in_background(lambda: _api(user, order, body))
        _wait_for(lambda: IdempotencyRecord.objects.filter(key=KEY).exists())
        # The slow request looks abandoned; the next one with the key takes it over (and then
        # waits for the order lock too).
        IdempotencyRecord.objects.update(claimed_at=timezone.now() - timedelta(minutes=2))
        taker, second = _in_background(lambda: _api(user, order, body))
        _wait_for(
            lambda: IdempotencyRecord.objects.filter(
                claimed_at__gt=timezone.now() - timedelta(minutes=1)
            ).exists()
        )
    slow.join(30)
    taker.join(30)

    answers = sorted([first["response"], second["response"]], key=lambda r: r.status_code)
    assert [r.status_code for r in answers] == [201, 409], [r.content for r in answers]
    assert answers[1].json()["error"]["code"] == "idempotency_in_flight"
    assert Refund.objects.count() == 1 and _refunded(order) == 1000
    record = IdempotencyRecord.objects.get()
    assert record.state == "done" and record.refund_id == answers[0].json()["refund_id"]
