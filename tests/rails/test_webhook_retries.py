"""Stripe events whose processing fails: the error is kept on the event, the beat task
``rails.retry_webhook_events`` tries again a few minutes later, and gives up, loudly, after
a bounded number of attempts. The failure is real (tests/rails/failing_stripe_event.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
import time_machine
from django.db import OperationalError, connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from audit.models import AuditRecord
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.event_attempts import attempt_event, claim_events_to_retry, give_up_on_events
from sill.rails.models import WebhookEvent
from sill.rails.stripe_webhooks import store_event
from sill.rails.tasks import retry_webhook_events_task
from tests.broker_down import broker_unreachable
from tests.rails import stripe_facts_stub
from tests.rails.failing_stripe_event import books_agree, books_disagree, too_large_refund
from tests.rails.loopback import keepalive_server
from tests.rails.stripe_events import deliverer, event, post_event, refund_obj, stripe_account
from tests.threads import row_locked_elsewhere
from tests.worker import running_worker, wait_for

pytestmark = pytest.mark.django_db

LATER = timedelta(minutes=6)  # past the default 5 minutes between attempts


@pytest.fixture
def charge(site, make_order) -> Iterator[Charge]:
    # A refusal has the charge read from Stripe (refunds.catch_up_charge): a loopback one.
    with keepalive_server(
        stripe_facts_stub.Handler, stub=stripe_facts_stub.StripeFactsStub()
    ) as at:
        stripe_account(site, api_base=at.url)
        charge = Charge.objects.get(order=make_order(total="89.00", rail="stripe"))
        books_disagree(charge)
        yield charge


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    return deliverer(django_capture_on_commit_callbacks)


@pytest.fixture
def clock():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield traveller


def stored() -> WebhookEvent:
    return WebhookEvent.objects.get()


def test_it_keeps_the_error_of_a_failed_attempt_and_logs_it(site, charge, deliver, caplog):
    with caplog.at_level(logging.ERROR, logger="sill.rails.event_attempts"):
        assert deliver(site, too_large_refund(charge)).status_code == 200

    event = stored()
    assert event.processed_at is None and event.outcome == ""
    assert event.attempts == 1 and event.last_attempt_at is not None
    # Named for what is wrong: Sill counts more refunded than the charge leaves room for.
    assert event.last_error.startswith("ExceedsCharge: outside refund re_too_large")
    assert "beside the 6000 Sill counts refunded" in event.last_error
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == 1 and logged[0].exc_info is not None
    # Rolled back whole: nothing of it was recorded.
    assert not ExternalRefund.objects.exists()
    assert not AuditRecord.objects.filter(kind="external_refund").exists()
    assert Charge.objects.get(pk=charge.pk).amount_refunded_outside_minor == 0


def test_it_retries_a_few_minutes_later_and_applies_once_the_cause_is_fixed(
    site, charge, deliver, clock
):
    deliver(site, too_large_refund(charge))

    assert retry_webhook_events_task() == 0  # too early
    assert stored().attempts == 1

    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    assert (stored().attempts, stored().processed_at) == (2, None)

    books_agree(charge)
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1

    event = stored()
    assert event.processed_at is not None and event.attempts == 3
    assert "external refund recorded" in event.outcome
    assert ExternalRefund.objects.get().amount_minor == 5000
    assert Order.objects.get(pk=charge.order_id).status == "PARTIALLY_REFUNDED"
    clock.shift(LATER)
    assert retry_webhook_events_task() == 0
    assert stored().attempts == 3
    assert AuditRecord.objects.filter(kind="external_refund").count() == 1


def test_a_charge_refunded_records_the_refunds_that_fit_and_retries_the_one_that_does_not(
    site, charge, deliver, clock
):
    # Seen before: one refund of a charge.refunded's list that does not fit beside Sill's
    # books rolled the whole event back, so the refunds Stripe listed beside it (facts that
    # lower what is refundable) were not recorded from it either, attempt after attempt.
    listed = [
        refund_obj(charge.provider_charge_id, refund_id="re_too_large", amount=5000),
        refund_obj(charge.provider_charge_id, refund_id="re_fits", amount=2000),
    ]
    obj = {"id": charge.provider_charge_id, "object": "charge", "refunds": {"data": listed}}
    deliver(site, event("charge.refunded", obj, event_id="evt_two"))

    assert list(ExternalRefund.objects.values_list("provider_refund_id", flat=True)) == ["re_fits"]
    assert Charge.objects.get(pk=charge.pk).amount_refunded_outside_minor == 2000
    # The one that does not fit fails the event as its own refund.created would: kept, retried.
    failed = stored()
    assert (failed.processed_at, failed.attempts) == (None, 1)
    assert failed.last_error.startswith("ExceedsCharge: outside refund re_too_large")

    books_agree(charge)
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    done = stored()
    assert done.processed_at is not None
    assert "re_fits: unchanged" in done.outcome and "re_too_large: external refund" in done.outcome
    assert Charge.objects.get(pk=charge.pk).amount_refunded_outside_minor == 7000
    assert AuditRecord.objects.filter(kind="external_refund").count() == 2


def test_it_gives_up_after_the_bound_and_says_so_loudly_once(
    site, charge, deliver, clock, settings, caplog
):
    settings.SILL_WEBHOOK_MAX_ATTEMPTS = 3
    deliver(site, too_large_refund(charge))
    for _ in range(2):
        clock.shift(LATER)
        assert retry_webhook_events_task() == 1
    assert stored().attempts == 3 and stored().gave_up_at is None

    with caplog.at_level(logging.ERROR, logger="sill.rails.event_attempts"):
        for _ in range(3):
            clock.shift(LATER)
            assert retry_webhook_events_task() == 0

    event = stored()
    assert event.attempts == 3 and event.processed_at is None
    assert event.gave_up_at is not None
    gave_up = [r.getMessage() for r in caplog.records if "GAVE UP" in r.getMessage()]
    assert len(gave_up) == 1
    assert "evt_too_large" in gave_up[0] and site.pk in gave_up[0]
    assert "ExceedsCharge" in gave_up[0] and "replay-webhooks" in gave_up[0]
    # The task itself no longer tries it (a redelivered message, say): only a replay does.
    assert attempt_event(event.pk).ok is False
    assert stored().attempts == 3
    books_agree(charge)
    assert attempt_event(event.pk, bounded=False).ok is True
    assert ExternalRefund.objects.count() == 1


def test_it_enqueues_an_event_whose_task_never_ran(site, charge, clock):
    books_agree(charge)
    body = too_large_refund(charge)
    # Stored by the webhook, but the on-commit enqueue never happens here (a broker down).
    post_event(site, body)
    assert stored().attempts == 0

    assert retry_webhook_events_task() == 0
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1

    assert stored().processed_at is not None and stored().attempts == 1
    assert ExternalRefund.objects.count() == 1


def test_it_claims_an_event_once_per_interval(site, charge, clock):
    body = too_large_refund(charge)
    post_event(site, body)
    clock.shift(LATER)
    pk = stored().pk

    # A backlog: the first run's task has not run yet when the next runs come.
    assert claim_events_to_retry() == [(pk, "stripe")]
    assert claim_events_to_retry() == []
    clock.shift(timedelta(minutes=1))
    assert claim_events_to_retry() == []
    clock.shift(LATER)
    assert claim_events_to_retry() == [(pk, "stripe")]


def test_it_claims_every_webhook_rails_events_each_with_its_rail(site, charge, clock):
    # Every rail that takes webhooks (tests/rails/test_webhook_retries_every_rail.py); the
    # mock rail takes none, so an event stored under its name is no one's to process.
    shopify = WebhookEvent.objects.create(
        site=site, rail="shopify", event_id="shp_1", type="orders/updated", payload="{}"
    )
    WebhookEvent.objects.create(site=site, rail="mock", event_id="m_1", type="x", payload="{}")
    clock.shift(LATER)
    assert claim_events_to_retry() == [(shopify.pk, "shopify")]


def test_it_is_scheduled_every_minute():
    task = PeriodicTask.objects.get(task="rails.retry_webhook_events")
    assert task.enabled and (task.interval.every, task.interval.period) == (1, "minutes")


@contextmanager
def order_locked_elsewhere(order_id: str) -> Iterator[None]:
    """Another connection holds ``order_id``'s row lock, and this one waits at most 200 ms for
    a lock: processing an event of the order fails with a real lock timeout."""
    with row_locked_elsewhere(Order, order_id):
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_gives_back_the_attempt_of_a_transient_database_error(site, make_order):
    account = stripe_account(site)
    charge = Charge.objects.get(order=make_order(total="89.00", rail="stripe"))
    # Stored the webhook's way, without enqueueing it: this test makes the attempt itself.
    assert store_event(account=account, payload=too_large_refund(charge)) is not None
    with order_locked_elsewhere(charge.order_id), pytest.raises(OperationalError):
        attempt_event(stored().pk)

    event = stored()
    assert event.processed_at is None and event.attempts == 0
    assert "lock" in event.last_error.lower()
    assert attempt_event(event.pk).ok is True
    assert stored().attempts == 1 and ExternalRefund.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_transient_error_long_after_the_event_arrived_counts_and_ends_in_a_give_up(
    site, make_order, settings, caplog
):
    """Before: a lock timeout (or Shopify throttling) gave its attempt back every time, so an
    event whose "transient" failure never passed was retried every few minutes for good and
    never given up: nobody was told."""
    settings.SILL_WEBHOOK_MAX_ATTEMPTS = 2
    account = stripe_account(site)
    charge = Charge.objects.get(order=make_order(total="89.00", rail="stripe"))
    assert store_event(account=account, payload=too_large_refund(charge)) is not None
    arrived = timezone.now() - timedelta(seconds=settings.SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS)
    WebhookEvent.objects.update(received_at=arrived)

    with order_locked_elsewhere(charge.order_id), caplog.at_level(logging.ERROR):
        for attempt in (1, 2):
            outcome = attempt_event(stored().pk)  # kept, not raised for a quick retry
            assert outcome.ok is False and "lock" in outcome.outcome.lower()
            assert stored().attempts == attempt
            WebhookEvent.objects.update(last_attempt_at=timezone.now() - LATER)
        assert claim_events_to_retry() == []  # out of attempts
        assert give_up_on_events() == 1

    event = stored()
    assert event.gave_up_at is not None and event.processed_at is None
    assert "lock" in event.last_error.lower()
    assert any(r.getMessage().startswith("GAVE UP on Stripe event") for r in caplog.records)
    assert not ExternalRefund.objects.exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_keeps_the_error_and_the_beat_task_retries_it(tmp_path, site, make_order):
    stripe_account(site)
    charge = Charge.objects.get(order=make_order(total="89.00", rail="stripe"))
    books_disagree(charge)
    body = too_large_refund(charge)

    with running_worker(tmp_path / "worker.log"):
        response = post_event(site, body)
        assert response.json() == {"received": True, "duplicate": False}
        wait_for(lambda: stored().attempts == 1 and stored().last_error != "", what="attempt 1")
        assert stored().last_error.startswith("ExceedsCharge") and stored().processed_at is None

        books_agree(charge)
        WebhookEvent.objects.update(last_attempt_at=timezone.now() - LATER)
        retry_webhook_events_task.delay()  # the worker runs the beat task, then the event
        wait_for(lambda: stored().processed_at is not None, what="the retried attempt")

    assert stored().attempts == 2
    assert ExternalRefund.objects.get().amount_minor == 5000


def test_a_stored_event_is_acknowledged_while_the_broker_is_down(site, charge, clock, deliver):
    """Stored, the event is Sill's to process: the rail is told so (not a 500 that makes it
    deliver again into the duplicate check), and the beat task processes it."""
    books_agree(charge)
    with broker_unreachable():
        response = deliver(site, too_large_refund(charge))
    assert response.status_code == 200 and response.json()["duplicate"] is False
    assert stored().attempts == 0 and stored().processed_at is None

    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    assert stored().processed_at is not None
    assert ExternalRefund.objects.count() == 1
