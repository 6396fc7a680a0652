"""PayPal, Shopify and WooCommerce events get what Stripe's always had (tests/rails/
test_webhook_retries.py): an event stored while the broker was down is picked up by the beat
task ``rails.retry_webhook_events``; a failed attempt is kept on the event, tried again a few
minutes later, and given up loudly after a bounded number of attempts.

Seen before: those rails' tasks retried only a lost database connection, so an event whose
task never ran (the broker down when it was stored) or whose processing failed stayed
unprocessed for good, with no error kept and nothing logged past the task's own traceback;
and their redeliveries are answered "duplicate", so nothing ever tried it again.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
import time_machine
from django.db.models import F
from django.test import Client
from django.utils import timezone

from refunds.models import ReconciliationItem
from sill.accounts import two_factor
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from sill.rails.tasks import retry_webhook_events_task
from tests.rails.shopify_fixtures import signed_headers
from tests.rails.test_paypal_webhooks import deliver as deliver_paypal
from tests.rails.test_paypal_webhooks import refund_event
from tests.rails.woo_fixtures import woo_headers

pytestmark = pytest.mark.django_db

LATER = timedelta(minutes=6)  # past the default 5 minutes between attempts


@pytest.fixture
def clock():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield traveller


def stored(rail: str) -> WebhookEvent:
    return WebhookEvent.objects.get(rail=rail)


def test_a_paypal_event_whose_task_never_ran_is_applied_by_the_beat_task(
    site, paypal, paypal_account, paypal_order, clock, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="89.00")
    with django_capture_on_commit_callbacks(execute=False) as enqueued:  # the broker is down
        response = deliver_paypal(site, paypal, refund_event(paypal, capture, value="30.00"))
    assert response.status_code == 200 and len(enqueued) == 1
    assert stored("paypal").processed_at is None and stored("paypal").attempts == 0

    assert retry_webhook_events_task() == 0  # too early: its task may still be on its way
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1  # eager: the PayPal task applies it now
    event = stored("paypal")
    assert event.processed_at is not None and event.attempts == 1
    assert "external refund recorded" in event.outcome
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 3000
    clock.shift(LATER)
    assert retry_webhook_events_task() == 0


def test_a_failing_paypal_event_is_kept_retried_and_given_up_loudly(
    site, paypal, paypal_account, paypal_order, clock, settings, caplog,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    settings.SILL_WEBHOOK_MAX_ATTEMPTS = 2
    order, capture = paypal_order(total="89.00")
    # Sill's books count $70.00 refunded; PayPal reports $30.00 refunded outside Sill.
    Charge.objects.filter(order=order).update(amount_refunded_minor=7000)
    with (
        caplog.at_level(logging.ERROR, logger="sill.rails.event_attempts"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        deliver_paypal(site, paypal, refund_event(paypal, capture, value="30.00"))
    event = stored("paypal")
    assert (event.processed_at, event.attempts) == (None, 1)
    assert event.last_error.startswith("ExceedsCharge: outside refund")
    assert any("PayPal event" in r.getMessage() for r in caplog.records)
    # And the charge was reconciled at once (old, it is read by no run): the inbox shows it.
    opened = ReconciliationItem.objects.filter(order=order, resolved_at__isnull=True)
    assert "it would exceed the charge" in " ".join(opened.values_list("detail", flat=True))

    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    assert stored("paypal").attempts == 2
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="sill.rails.event_attempts"):
        for _ in range(2):
            clock.shift(LATER)
            assert retry_webhook_events_task() == 0
    gave_up = [r.getMessage() for r in caplog.records if "GAVE UP" in r.getMessage()]
    assert len(gave_up) == 1
    assert "GAVE UP on PayPal event" in gave_up[0] and "--rail paypal" in gave_up[0]
    assert stored("paypal").gave_up_at is not None
    assert not ExternalRefund.objects.exists()


def test_a_shopify_event_whose_task_never_ran_is_applied_by_the_beat_task(
    site, shopify, shopify_account, clock, django_capture_on_commit_callbacks
):
    placed = shopify.add_order()
    body = json.dumps(
        {"id": placed.id, "admin_graphql_api_id": placed.gid, "name": placed.name, "test": True}
    ).encode()
    headers = signed_headers(body, topic="orders/create", webhook_id="wh-lost")
    with django_capture_on_commit_callbacks(execute=False):
        response = Client().post(
            f"/webhooks/shopify/{site.pk}", body, content_type="application/json", **headers
        )
    assert response.status_code == 200 and not Order.objects.exists()
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    event = stored("shopify")
    assert event.processed_at is not None and event.outcome.startswith("created")
    assert Charge.objects.get().provider_payment_id == str(placed.id)


def test_a_woocommerce_event_whose_task_never_ran_is_applied_by_the_beat_task(
    site, woo, woo_account, clock, django_capture_on_commit_callbacks
):
    placed = woo.add_order(total="42.00", stripe_charge="ch_lost_task")
    body = json.dumps(placed.json()).encode()
    with django_capture_on_commit_callbacks(execute=False):
        response = Client().post(
            f"/webhooks/woocommerce/{site.pk}",
            body,
            content_type="application/json",
            **woo_headers(body, url=woo.url, topic="order.created"),
        )
    assert response.status_code == 200 and not Order.objects.exists()
    clock.shift(LATER)
    assert retry_webhook_events_task() == 1
    assert stored("woocommerce").processed_at is not None
    assert Order.objects.get(site=site).total_minor == 4200


def test_a_woocommerce_event_retried_after_the_site_switched_stores_is_settled_not_filed(
    site, members, woo, woo_account, clock, django_capture_on_commit_callbacks
):
    """The retry of an event from the store the site was connected to before: once settled
    with words (nothing filed under the store connected now), it is not retried again."""
    from sill.rails.woocommerce.connect import configure_woocommerce
    from tests.rails.woo_stub import CONSUMER_KEY, CONSUMER_SECRET, StubServer

    placed = woo.add_order(total="42.00", stripe_charge="ch_before_switch")
    body = json.dumps(placed.json()).encode()
    with django_capture_on_commit_callbacks(execute=False):
        Client().post(
            f"/webhooks/woocommerce/{site.pk}",
            body,
            content_type="application/json",
            **woo_headers(body, url=woo.url, topic="order.created"),
        )
    with StubServer() as other:
        configure_woocommerce(
            site=site, actor=members["owner"].user, store_url=other.url,
            consumer_key=CONSUMER_KEY, consumer_secret=CONSUMER_SECRET,
            webhook_secret="store-b-webhook-secret", second_factor=two_factor.OPERATOR,
        )  # fmt: skip
        clock.shift(LATER)
        assert retry_webhook_events_task() == 1
    event = stored("woocommerce")
    assert event.processed_at is not None and event.gave_up_at is None
    assert woo.url in event.outcome and other.url in event.outcome
    assert not Order.objects.exists()
    clock.shift(LATER)
    assert retry_webhook_events_task() == 0


def test_a_replay_attempts_a_given_up_paypal_event_again_once_the_cause_is_fixed(
    site, paypal, paypal_account, paypal_order, settings, django_capture_on_commit_callbacks
):
    from io import StringIO

    from django.core.management import call_command

    settings.SILL_WEBHOOK_MAX_ATTEMPTS = 1
    order, capture = paypal_order(total="89.00")
    Charge.objects.filter(order=order).update(amount_refunded_minor=7000)
    with django_capture_on_commit_callbacks(execute=True):
        deliver_paypal(site, paypal, refund_event(paypal, capture, value="30.00"))
    WebhookEvent.objects.update(gave_up_at=timezone.now(), received_at=F("received_at"))
    Charge.objects.filter(order=order).update(amount_refunded_minor=0)  # the books mended
    out = StringIO()
    call_command(
        "rails", "replay-webhooks", "--site", site.pk, "--rail", "paypal",
        "--since", (timezone.now() - timedelta(days=1)).date().isoformat(), stdout=out,
    )  # fmt: skip
    assert "1 stored PayPal event(s) not yet applied since" in out.getvalue()
    assert "1 processed, 0 failed" in out.getvalue()
    assert stored("paypal").processed_at is not None
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 3000


def test_the_command_a_give_up_names_applies_the_event_for_a_site_west_of_utc(
    site, paypal, paypal_account, paypal_order, settings, caplog,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """Before: the line said ``--since <the UTC date>``, which the command reads as midnight
    in the site's zone: for a site in Los Angeles an event received at 03:00 UTC came before
    it, and the replay found nothing and exited 0."""
    import shlex
    from io import StringIO

    from django.core.management import call_command

    site.timezone = "America/Los_Angeles"
    site.save(update_fields=["timezone"])
    settings.SILL_WEBHOOK_MAX_ATTEMPTS = 1
    order, capture = paypal_order(total="89.00")
    Charge.objects.filter(order=order).update(amount_refunded_minor=7000)
    early = timezone.now().replace(hour=3, minute=0, second=7) - timedelta(days=1)
    with time_machine.travel(early, tick=False) as clock:
        with django_capture_on_commit_callbacks(execute=True):
            deliver_paypal(site, paypal, refund_event(paypal, capture, value="30.00"))
        assert stored("paypal").attempts == 1
        clock.shift(LATER)
        with caplog.at_level(logging.ERROR, logger="sill.rails.event_attempts"):
            retry_webhook_events_task()
    line = next(r.getMessage() for r in caplog.records if "GAVE UP" in r.getMessage())
    command = shlex.split(line.split("run `manage.py ", 1)[1].split("`", 1)[0])

    Charge.objects.filter(order=order).update(amount_refunded_minor=0)  # the books mended
    out = StringIO()
    call_command(*command, stdout=out)
    assert "1 processed, 0 failed" in out.getvalue(), out.getvalue()
    assert stored("paypal").processed_at is not None
