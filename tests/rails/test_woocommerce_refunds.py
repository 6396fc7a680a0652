"""A WooCommerce order's refund runs on Stripe (localstripe), then is recorded on the Woo order.

The refund is a staff refund through the real pipeline, executed as the task executes it;
``record_refund_on_woocommerce`` is what settlement calls once Stripe confirmed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from refunds.execution import execute_refund
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.money import Money
from sill.rails.registry import RailDisabled, rail_from_account
from sill.rails.woocommerce import woocommerce_stripe_refusal
from sill.rails.woocommerce.models import WooRecordState, WooRefundRecord
from sill.rails.woocommerce.record import (
    RETRY_EVERY,
    attempt_record,
    record_refund_on_woocommerce,
    woocommerce_records_for,
)
from sill.rails.woocommerce.sync import sync_orders
from sill.rails.woocommerce.tasks import retry_woocommerce_records
from tests.rails.stripe_events import stripe_account
from tests.rails.test_stripe_late_failures import failed_event

pytestmark = pytest.mark.django_db


def _paid_at_localstripe(sdk) -> tuple[str, str]:
    """A confirmed $89.00 card payment at localstripe: its intent id and charge id."""
    intent = sdk.v1.payment_intents.create(
        params={
            "amount": 8900,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "payment_method_types": ["card"],
            "confirm": True,
        }
    )
    charge = intent.latest_charge
    return intent.id, charge if isinstance(charge, str) else charge.id


@pytest.fixture
def woo_paid(site, woo, woo_account, sdk, localstripe_url):
    """A Woo order paid at localstripe, synced into Sill; the site's Stripe rail connected."""
    stripe_account(site, enabled=True, api_base=localstripe_url)
    intent, charge = _paid_at_localstripe(sdk)
    placed = woo.add_order(total="89.00", stripe_intent=intent, stripe_charge=charge)
    sync_orders(site=site)
    from sill.rails.woocommerce.models import WooOrderLink

    return WooOrderLink.objects.get(woo_order_id=placed.id).order, placed, charge


def _refund_on_stripe(site, members, order, capture) -> Refund:
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with capture(execute=False):
        refund = create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
        )
    execute_refund(refund.pk)
    return Refund.objects.get(pk=refund.pk)


def test_it_refunds_on_stripe_then_records_on_the_woo_order_without_moving_money(
    site, members, woo, woo_paid, sdk, django_capture_on_commit_callbacks
):
    order, placed, charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "succeeded" and refund.rail == "stripe"
    assert sdk.v1.charges.retrieve(charge).amount_refunded == 8900
    result = record_refund_on_woocommerce(
        order=order, refund_id=refund.pk, amount=refund.amount, reason="Defective"
    )
    assert result.state == "recorded"
    [posted] = woo.refund_posts
    assert posted["amount"] == "89.00" and posted["api_refund"] is False
    assert f"Sill refund {refund.pk}" in posted["reason"]
    assert result.woo_refund_id == str(placed.refunds[0]["id"])
    # Again (a redelivered task): nothing more is written.
    again = record_refund_on_woocommerce(
        order=order, refund_id=refund.pk, amount=refund.amount, reason="Defective"
    )
    assert again.state == "recorded" and len(woo.refund_posts) == 1


def test_read_only_keys_leave_the_refund_done_and_say_why_then_retry(
    site, members, woo, woo_paid, django_capture_on_commit_callbacks
):
    order, placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    woo.read_only = True
    result = record_refund_on_woocommerce(
        order=order, refund_id=refund.pk, amount=refund.amount, reason="Defective"
    )
    assert result.state == "not_updated"
    assert "read-only (woocommerce_rest_cannot_create)" in result.message
    assert "The Stripe refund is done" in result.message
    assert Refund.objects.get(pk=refund.pk).status == "succeeded"
    [shown] = woocommerce_records_for(order)
    assert shown.state == WooRecordState.NOT_UPDATED and shown.last_error == result.message
    # The keys get write access; the beat task's next pass records it, once.
    woo.read_only = False
    WooRefundRecord.objects.filter(pk=shown.pk).update(next_attempt_at=shown.created_at)
    assert retry_woocommerce_records() == 1
    shown.refresh_from_db()
    assert shown.state == WooRecordState.RECORDED
    assert len(placed.refunds) == 1


def test_a_store_that_asks_for_a_short_wait_is_retried_by_the_task_no_sooner(
    site, members, woo, woo_paid, django_capture_on_commit_callbacks
):
    """The Stripe refund is done; the Woo order's record is what a store's rate limit (a
    host's, a security plugin's) refuses. The task's own retry came 30 s later whatever the
    store asked, refused again, a retry spent each time."""
    from celery.exceptions import Retry

    from sill.rails.woocommerce.record import record_woocommerce_refund

    order, placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "succeeded"
    woo.fail_next, woo.retry_after = ["429"], "120"
    # As a worker runs it (a real request, not eager): its retry is sent with a countdown.
    record_woocommerce_refund.push_request(
        id="task-1", args=[refund.pk], kwargs={}, retries=0, called_directly=False
    )
    try:
        with pytest.raises(Retry) as retried:
            record_woocommerce_refund.run(refund.pk)
    finally:
        record_woocommerce_refund.pop_request()
    assert retried.value.when >= 120
    # The retry itself ran at once here (the tests' Celery is eager): before the store's two
    # minutes, it sends nothing. After them it records it, once.
    [shown] = woocommerce_records_for(order)
    assert shown.state == WooRecordState.NOT_UPDATED and len(woo.refund_posts) == 1
    with time_machine.travel(timezone.now() + timedelta(seconds=121), tick=False):
        assert attempt_record(refund_id=refund.pk).state == WooRecordState.RECORDED
    assert len(placed.refunds) == 1 and len(woo.refund_posts) == 2
    assert Refund.objects.get(pk=refund.pk).status == "succeeded"


def test_a_store_that_asks_for_a_long_wait_is_left_to_the_beat_task_until_then(
    site, members, woo, woo_paid, django_capture_on_commit_callbacks
):
    """A store in maintenance mode for half an hour: neither the task's soon retries nor the
    beat task's next pass (every 15 minutes) asks before the half hour is over."""
    import time_machine
    from django.utils import timezone

    from sill.rails.woocommerce.record import record_woocommerce_refund

    order, placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    woo.fail_next, woo.retry_after = ["503"], "1800"
    asked_at = timezone.now()
    assert record_woocommerce_refund.apply(args=[refund.pk]).get() == "not_updated"
    assert len(woo.refund_posts) == 1
    [shown] = woocommerce_records_for(order)
    assert shown.state == WooRecordState.NOT_UPDATED and "not updated yet" in shown.last_error
    assert shown.next_attempt_at >= asked_at + timedelta(seconds=1800)
    with time_machine.travel(asked_at + timedelta(minutes=20), tick=False):
        assert retry_woocommerce_records() == 0
    with time_machine.travel(asked_at + timedelta(minutes=31), tick=False):
        assert retry_woocommerce_records() == 1
    shown.refresh_from_db()
    assert shown.state == WooRecordState.RECORDED and len(placed.refunds) == 1
    assert len(woo.refund_posts) == 2


def test_the_record_says_how_long_the_store_asked_to_wait(
    site, members, woo, woo_paid, django_capture_on_commit_callbacks
):
    order, _placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    woo.fail_next, woo.retry_after = ["429", "429"], "an hour or so"
    result = record_refund_on_woocommerce(
        order=order, refund_id=refund.pk, amount=refund.amount, reason="Defective"
    )
    assert (result.state, result.retry_after) == ("not_updated", None)  # garbage: no wait
    woo.retry_after = "45"
    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=False):
        result = attempt_record(refund_id=refund.pk)  # the first soon retry
    assert (result.state, result.retry_after) == ("not_updated", 45)
    [shown] = woocommerce_records_for(order)
    assert shown.next_attempt_at >= timezone.now() + timedelta(seconds=40)


def test_a_woo_site_without_stripe_cannot_refund_and_says_to_connect_stripe(
    site, members, woo, woo_account, make_order
):
    placed = woo.add_order(stripe_charge="ch_nostripe")
    sync_orders(site=site)
    from sill.rails.woocommerce.models import WooOrderLink

    order = WooOrderLink.objects.get(woo_order_id=placed.id).order
    refused = woocommerce_stripe_refusal(site_id=site.pk, order_id=order.pk)
    assert isinstance(refused, RailDisabled) and refused.code == "rail_disabled"
    assert "connect" in refused.message.lower() and "Stripe" in refused.message
    plain = make_order(rail="stripe")
    assert woocommerce_stripe_refusal(site_id=site.pk, order_id=plain.pk) is None
    with pytest.raises(RailDisabled, match="run on Stripe"):
        rail_from_account(woo_account)
    assert Money(1, "USD")  # money stays in minor units end to end


def test_an_agent_refund_of_a_woo_order_runs_on_stripe_and_is_recorded_on_the_order(
    site, woo_paid, woo, api, sign, sdk
):
    from tests.rails.test_shopify_agent_refunds import shopify_intent

    order, placed, charge = woo_paid
    intent = shopify_intent(str(placed.id))
    intent["original_order"] = {"rail": "woocommerce", "id": str(placed.id)}
    answer = api(sign(intent)).json()
    assert (answer["decision"], answer["rail"], answer["amount"]) == ("approved", "stripe", "89.00")
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", refund.failure_message
    assert sdk.v1.charges.retrieve(charge).amount_refunded == 8900
    [record] = woocommerce_records_for(order)
    assert record.refund_id == refund.pk


def test_without_stripe_a_woo_order_is_refused_rail_disabled_on_every_path(
    site, woo_paid, api, sign, members
):
    from sill.rails.models import RailAccount
    from tests.rails.test_shopify_agent_refunds import shopify_intent

    order, placed, _charge = woo_paid
    RailAccount.objects.filter(site=site, rail="stripe").update(enabled=False)
    intent = shopify_intent(str(placed.id))
    intent["original_order"] = {"rail": "woocommerce", "id": str(placed.id)}
    answer = api(sign(intent)).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "rail_disabled"), answer
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="wrong_item").first()
    with pytest.raises(SillError, match="takes its payments through Stripe") as refused:
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
        )
    assert (refused.value.code, refused.value.status) == ("rail_disabled", 409)
    assert not Refund.objects.filter(status__in=["processing", "succeeded"]).exists()


def test_the_staff_api_keeps_no_answer_for_a_woo_order_refused_until_stripe_is_connected(
    site, woo_paid, client_for, django_capture_on_commit_callbacks
):
    """The staff API answered every refusal of the quote ``order_not_refundable`` and stored
    it under the Idempotency-Key, "connect Stripe" included: once the merchant connected
    Stripe, the client's retry with the same key was answered the stored refusal forever.
    It is ``rail_disabled`` (as the API documents), and the key is released."""
    import json

    from refunds.models import IdempotencyRecord
    from sill.rails.models import RailAccount

    order, _placed, _charge = woo_paid
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="wrong_item").first()
    RailAccount.objects.filter(site=site, rail="stripe").update(enabled=False)
    client = client_for("staff")

    def send():
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                f"/api/order/{order.id}/refund",
                data=json.dumps({"full": True, "reasonId": str(reason.pk)}),
                content_type="application/json",
                headers={"Idempotency-Key": "woo-retry-1"},
            )

    refused = send()
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "rail_disabled"
    assert "Stripe" in refused.json()["error"]["message"]
    assert not IdempotencyRecord.objects.exists()
    RailAccount.objects.filter(site=site, rail="stripe").update(enabled=True)
    made = send()
    assert made.status_code == 201, made.content
    assert "Idempotent-Replayed" not in made


def test_a_record_whose_task_was_lost_or_crashed_is_picked_up_by_the_beat_task(
    site, members, woo, woo_paid, woo_account, django_capture_on_commit_callbacks
):
    """The record's task is sent on commit; a worker killed on the embedded broker loses it,
    and an attempt that crashes (a stored key that cannot be read) ends without a state. The
    beat task must still find the record, or the order page says "Being recorded" forever."""
    import time_machine
    from django.test import override_settings
    from django.utils import timezone

    from sill.rails.secrets import RailSecretUnreadable
    from sill.rails.woocommerce.record import RETRY_EVERY, attempt_record

    order, placed, _charge = woo_paid
    # Settled; the record's on-commit task is never run (as if lost with its worker).
    _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    [record] = woocommerce_records_for(order)
    assert record.state == WooRecordState.PENDING
    with time_machine.travel(timezone.now() + RETRY_EVERY, tick=False):
        assert retry_woocommerce_records() == 1
    record.refresh_from_db()
    assert record.state == WooRecordState.RECORDED and len(placed.refunds) == 1

    # An attempt that crashes mid-way (the store's keys cannot be decrypted right now) is
    # picked up again once the merchant has fixed it.
    second = woo.add_order(total="10.00", stripe_charge="ch_second")
    sync_orders(site=site)
    from sill.rails.woocommerce.models import WooOrderLink

    other = WooOrderLink.objects.get(woo_order_id=second.id).order
    WooRefundRecord.objects.create(
        refund_id="rf_crashed", site=site, order=other, amount_minor=1000, currency="USD"
    )
    lost_key = "a-key-the-stored-secret-was-not-sealed-with-" + "z" * 20
    with override_settings(SECRET_KEY=lost_key), pytest.raises(RailSecretUnreadable):
        attempt_record(refund_id="rf_crashed")
    crashed = WooRefundRecord.objects.get(refund_id="rf_crashed")
    assert crashed.state == WooRecordState.PENDING
    with time_machine.travel(timezone.now() + RETRY_EVERY, tick=False):
        assert retry_woocommerce_records() == 1
    crashed.refresh_from_db()
    assert crashed.state == WooRecordState.RECORDED and len(second.refunds) == 1


def test_a_refund_of_an_order_from_a_store_no_longer_connected_is_not_written_on_the_new_one(
    site, members, woo, woo_paid, woo_account, django_capture_on_commit_callbacks
):
    """Woo order ids are per store: once the site is connected to another store, the old
    store's order 1001 is not the new store's order 1001. Writing the refund there marked a
    stranger's order refunded. (Such an order is no longer refunded at all, see
    test_woocommerce_store_switch.py; this is a refund settled before the switch whose record
    is written after it.)"""
    from tests.rails.woo_stub import StubServer

    order, _placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    with StubServer() as other:
        other.add_order(total="89.00", stripe_charge="ch_someone_else")  # the same id, 1001
        woo_account.connected_account = other.url
        woo_account.save()
        result = record_refund_on_woocommerce(
            order=order, refund_id=refund.pk, amount=refund.amount, reason="Defective"
        )
        assert other.refund_posts == [] and woo.refund_posts == []
        assert result.state == WooRecordState.GAVE_UP
        assert woo.url in result.message and other.url in result.message


def test_an_agent_naming_a_woo_order_gets_the_connected_stores_order_not_an_old_stores(
    site, woo, woo_paid, woo_account, api, sign, sdk
):
    """Once a site is connected to another store, both stores' order 1001 are in Sill (links
    name their store). An agent's mandate names an order by its Woo id alone, so it means the
    store connected now: refunding the old store's 1001 instead paid back someone else's
    Stripe charge (the older of the two charges was the one picked)."""
    from sill.rails.woocommerce.models import WooOrderLink
    from tests.rails.test_shopify_agent_refunds import shopify_intent
    from tests.rails.woo_stub import StubServer

    _old_order, placed, old_charge = woo_paid
    intent_b, new_charge = _paid_at_localstripe(sdk)
    with StubServer() as other:
        again = other.add_order(total="89.00", stripe_intent=intent_b, stripe_charge=new_charge)
        assert again.id == placed.id  # Woo order ids are per store
        woo_account.connected_account = other.url
        woo_account.orders_synced_through = None
        woo_account.save()
        sync_orders(site=site)
        new_order = WooOrderLink.objects.get(store_url=other.url, woo_order_id=again.id).order
        intent = shopify_intent(str(again.id))
        intent["original_order"] = {"rail": "woocommerce", "id": str(again.id)}
        answer = api(sign(intent)).json()
        assert answer["decision"] == "approved", answer
        refund = Refund.objects.get(pk=answer["refund_id"])
        assert refund.order_id == new_order.pk
        assert sdk.v1.charges.retrieve(new_charge).amount_refunded == 8900
        assert sdk.v1.charges.retrieve(old_charge).amount_refunded == 0


def test_a_store_quoting_the_credential_back_never_has_it_in_sills_words():
    """A store (or a security plugin before it) that echoes the request's consumer key or
    secret in its error message: the secret was redacted, the key was not, and went into the
    refund record's words and the log."""
    import requests

    from sill.rails.woocommerce.client import WooClient

    client = WooClient(
        store_url="https://store.example", consumer_key="ck_" + "a" * 40,
        consumer_secret="cs_" + "b" * 40,
    )  # fmt: skip
    answer = requests.Response()
    answer.status_code = 401
    answer._content = (
        b'{"code": "woocommerce_rest_authentication_error", "message": "Consumer key ck_'
        + b"a" * 40
        + b" with secret cs_"
        + b"b" * 40
        + b' is invalid."}'
    )
    words = client._error(answer, "refund record").message
    assert "ck_" + "a" * 40 not in words and "cs_" + "b" * 40 not in words
    assert words.count("[redacted]") == 2


# --- a refund Stripe reports failed after it was settled ------------------------------------


def test_a_refund_reversed_before_its_record_is_never_written_on_the_woo_order(
    site, members, woo, woo_paid, sdk, deliver, client_for, django_capture_on_commit_callbacks
):
    order, placed, _charge = woo_paid
    woo.read_only = True  # the record waits for keys with write access
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    assert attempt_record(refund_id=refund.pk).state == WooRecordState.NOT_UPDATED
    # Stripe then reports the refund failed: the buyer's money came back to the merchant.
    assert deliver(site, failed_event(sdk, refund)).status_code == 200
    assert Refund.objects.get(pk=refund.pk).outcome_code == "failed_after_settlement"
    # The merchant fixes the keys; neither the beat task nor a late task writes a refund the
    # buyer never got on the Woo order.
    woo.read_only = False
    with time_machine.travel(timezone.now() + RETRY_EVERY + timedelta(minutes=1), tick=False):
        retry_woocommerce_records()
        attempt_record(refund_id=refund.pk)
    assert placed.refunds == [] and len(woo.refund_posts) == 1  # the read-only attempt only
    [record] = woocommerce_records_for(order)
    assert record.state == WooRecordState.WITHDRAWN and record.next_attempt_at is None
    page = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    assert "Not recorded on the WooCommerce order" in page
    assert "the Stripe refund failed after it was settled" in page
    assert "Sill retries every 15 minutes" not in page


def test_a_refund_reversed_after_its_record_says_to_remove_it_from_the_woo_order(
    site, members, woo, woo_paid, sdk, deliver, client_for, django_capture_on_commit_callbacks
):
    order, placed, _charge = woo_paid
    refund = _refund_on_stripe(site, members, order, django_capture_on_commit_callbacks)
    assert attempt_record(refund_id=refund.pk).state == WooRecordState.RECORDED
    assert deliver(site, failed_event(sdk, refund)).status_code == 200
    [record] = woocommerce_records_for(order)
    assert record.state == WooRecordState.RECORDED
    page = client_for("staff").get(f"/orders/{order.pk}/").content.decode()
    woo_refund = placed.refunds[0]["id"]
    assert f"its refund #{woo_refund}" in page
    assert "the Stripe refund failed after it was settled" in page
    assert f"delete refund #{woo_refund} from the WooCommerce order" in page
