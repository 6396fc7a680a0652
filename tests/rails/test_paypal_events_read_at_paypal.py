"""A PayPal event's refund or dispute is read again from PayPal's API and what PayPal holds is
recorded, never the body (sill.rails.paypal.events).

PayPal's signature covers only a CRC32 of the body, which a crafted body can keep. Seen
before: a verified delivery's body was applied as fact, so a body claiming a larger refund, a
refund PayPal never made, or a dispute status PayPal does not hold was recorded as such (a
fake outside refund lowers what can be refunded; a fake dispute outcome changes whether a
refund is allowed).
"""

from __future__ import annotations

import socket
from datetime import UTC, timedelta

import pytest
import time_machine
from django.utils import timezone

from refunds.staff.services import NotRefundable
from sill.money import Money
from sill.orders.models import Charge, Dispute, ExternalRefund
from sill.rails.base import RetryableRailError
from sill.rails.event_attempts import attempt_event
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.tasks import retry_webhook_events_task
from tests.rails.test_paypal_reconciliation import _run
from tests.rails.test_paypal_refunds import _execute, _refund
from tests.rails.test_paypal_webhooks import deliver, dispute_event, refund_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    def send(*args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return deliver(*args, **kwargs)

    return send


def test_it_records_the_refund_paypal_holds_not_the_amount_and_state_the_body_claims(
    site, paypal, paypal_account, paypal_order, run
):
    order, capture = paypal_order(total="89.00")
    held = paypal.add_refund(capture, value="10.00", status="PENDING")
    claimed = refund_event(paypal, capture, value="60.00", refund_id=held["id"])
    assert claimed["resource"]["status"] == "COMPLETED"
    assert run(site, paypal, claimed).status_code == 200
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert (outside.provider_refund_id, outside.amount_minor, outside.status) == (
        held["id"],
        1000,
        "pending",
    )
    assert paypal.lookups == [f"/v2/payments/refunds/{held['id']}"]


def test_it_records_nothing_for_a_refund_paypal_does_not_hold(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="89.00")
    response = run(site, paypal, refund_event(paypal, capture, value="80.00", held=False))
    assert response.status_code == 200
    event = WebhookEvent.objects.get(rail="paypal")
    assert event.processed_at is not None
    assert "PayPal holds no such refund; nothing recorded" in event.outcome
    assert not ExternalRefund.objects.exists()
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 0
    # The whole capture is still refundable.
    refund = _refund(
        site, members, order, django_capture_on_commit_callbacks,
        kind="amount", amount=Money(8900, "USD"),
    )  # fmt: skip
    assert _execute(refund)[0].status == "succeeded"


def test_it_records_nothing_when_paypals_refund_is_of_another_capture(
    site, paypal, paypal_account, paypal_order, run
):
    _, capture = paypal_order(total="89.00")
    _, other = paypal_order(total="50.00")
    held = paypal.add_refund(other, value="20.00")
    claimed = refund_event(paypal, capture, value="20.00", refund_id=held["id"])
    assert run(site, paypal, claimed).status_code == 200
    event = WebhookEvent.objects.get(rail="paypal")
    assert event.processed_at is not None and "nothing recorded" in event.outcome
    assert not ExternalRefund.objects.exists()


def test_a_body_claiming_sills_refund_id_on_an_outside_refund_is_an_outside_refund(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="89.00")
    mine = _refund(
        site, members, order, django_capture_on_commit_callbacks,
        kind="amount", amount=Money(1000, "USD"),
    )  # fmt: skip
    mine, _ = _execute(mine)
    held = paypal.add_refund(capture, value="5.00")  # made in PayPal, no custom_id
    claimed = refund_event(paypal, capture, value="5.00", refund_id=held["id"], custom_id=mine.pk)
    assert run(site, paypal, claimed).status_code == 200
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert (outside.provider_refund_id, outside.amount_minor) == (held["id"], 500)


def test_it_records_the_dispute_status_paypal_holds_not_the_one_the_body_claims(
    site, members, paypal, paypal_account, paypal_order, run, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    assert run(site, paypal, dispute_event(paypal, capture)).status_code == 200
    # The body says PayPal resolved the dispute for the seller; PayPal holds it open.
    resolved = dispute_event(
        paypal, capture, kind="RESOLVED", status="RESOLVED",
        outcome="RESOLVED_SELLER_FAVOUR", held=False,
    )  # fmt: skip
    assert run(site, paypal, resolved).status_code == 200
    dispute = Dispute.objects.get(charge__order=order)
    assert (dispute.status, dispute.rail_status) == ("needs_response", "OPEN")
    with pytest.raises(NotRefundable, match="disputed"):
        _refund(site, members, order, django_capture_on_commit_callbacks)


def test_it_records_nothing_for_a_dispute_paypal_does_not_hold(
    site, paypal, paypal_account, paypal_order, run
):
    _, capture = paypal_order()
    event = dispute_event(paypal, capture, held=False)
    assert run(site, paypal, event).status_code == 200
    stored = WebhookEvent.objects.get(rail="paypal")
    assert stored.processed_at is not None
    assert "PayPal holds no such dispute; nothing recorded" in stored.outcome
    assert not Dispute.objects.exists()


def _paypal_time(when) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.mark.parametrize("kind", ["refund", "dispute"])
def test_a_change_paypal_times_before_reconciliations_read_still_applies(
    site, paypal, paypal_account, paypal_order, run, kind
):
    """Reconciliation records what it reads as of Sill's clock at the read; a webhook was
    timed by PayPal's ``update_time``, by PayPal's clock. With Sill's clock a few seconds
    ahead, a refund read PENDING (a dispute read OPEN) that PayPal then failed (resolved)
    carried an update time before that read: its webhook was dropped as older ("a newer event
    was already applied"), and the failed refund stayed counted, the lost dispute open."""
    order, capture = paypal_order(total="89.00")
    if kind == "refund":
        held = paypal.add_refund(capture, value="10.00", status="PENDING")
    else:
        held = dispute_event(paypal, capture)["resource"]
    _run(paypal_account)
    model = ExternalRefund if kind == "refund" else Dispute
    row = model.objects.get(charge__order=order)
    assert row.rail_updated_at is not None
    # PayPal changed it 2 s after Sill's read, by a clock 5 s behind Sill's.
    changed_at = _paypal_time(row.rail_updated_at - timedelta(seconds=3))
    if kind == "refund":
        held.update(status="FAILED", update_time=changed_at)
        event = refund_event(paypal, capture, value="10.00", refund_id=held["id"])
    else:
        event = dispute_event(
            paypal, capture, kind="RESOLVED", status="RESOLVED",
            outcome="RESOLVED_BUYER_FAVOUR", held=False,
        )  # fmt: skip
        event["resource"]["update_time"] = changed_at
        paypal.put_dispute(event["resource"])
    assert run(site, paypal, event).status_code == 200
    row.refresh_from_db()
    if kind == "refund":
        assert (row.status, row.counted_minor) == ("failed", 0)
        assert Charge.objects.get(order=order).amount_refunded_outside_minor == 0
    else:
        assert (row.status, row.rail_status) == ("lost", "RESOLVED:RESOLVED_BUYER_FAVOUR")


def _unreachable(paypal, account: RailAccount) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    account.api_base = f"http://127.0.0.1:{port}"
    account.save(update_fields=["api_base"])


def _answers_503(paypal, account: RailAccount) -> None:
    paypal.fail_next_lookup = ["503"]


def _answers_429(paypal, account: RailAccount) -> None:
    paypal.fail_next_lookup = ["429"]


def _answers_a_refund_of_another_shape(paypal, account: RailAccount) -> None:
    # Processed before as "malformed refund", recording nothing for good.
    unreadable = {"value": "thirty", "currency_code": "USD"}
    paypal.reshape("/v2/payments/refunds/", lambda held: {**held, "amount": unreadable}, times=1)


def _answers_a_refund_whose_links_are_a_number(paypal, account: RailAccount) -> None:
    # Processed before as "PayPal's refund is not of capture …; nothing recorded", for good.
    paypal.reshape("/v2/payments/refunds/", lambda held: {**held, "links": 5}, times=1)


@pytest.mark.parametrize(
    "failure",
    [
        _unreachable,
        _answers_503,
        _answers_429,
        _answers_a_refund_of_another_shape,
        _answers_a_refund_whose_links_are_a_number,
    ],
)
def test_paypal_not_answering_the_read_retries_the_event_and_records_nothing(
    site, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks, failure
):
    order, capture = paypal_order(total="89.00")
    with time_machine.travel(timezone.now(), tick=False) as clock:
        with django_capture_on_commit_callbacks(execute=False):
            deliver(site, paypal, refund_event(paypal, capture, value="30.00"))
        event = WebhookEvent.objects.get(rail="paypal")
        api_base = paypal_account.api_base
        failure(paypal, paypal_account)
        with pytest.raises(RetryableRailError):
            attempt_event(event.pk)
        event.refresh_from_db()
        assert event.processed_at is None and event.attempts == 0  # given back: transient
        # A 429 is the RateLimited kind of RetryableRailError (nothing was done at PayPal), an
        # answer Sill cannot read the PayPalUnreadable kind.
        assert event.last_error.startswith(
            ("RetryableRailError", "RateLimited", "PayPalUnreadable")
        )
        assert not ExternalRefund.objects.exists()

        RailAccount.objects.filter(pk=paypal_account.pk).update(api_base=api_base)
        clock.shift(timedelta(minutes=6))
        assert retry_webhook_events_task() == 1
    event.refresh_from_db()
    assert event.processed_at is not None and "external refund recorded" in event.outcome
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 3000


@pytest.mark.parametrize(
    "odd", [5, {"seller_transaction_id": "X"}, None], ids=["a-number", "an-object", "null"]
)
def test_a_dispute_paypal_holds_of_another_shape_retries_the_event(
    site, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks, odd
):
    # Seen before: PayPal's dispute whose disputed_transactions Sill could not read was taken
    # for another capture's ("nothing recorded"), and the event processed for good: the
    # dispute was never recorded, and refunds of the capture not refused.
    order, capture = paypal_order()
    with django_capture_on_commit_callbacks(execute=False):
        deliver(site, paypal, dispute_event(paypal, capture))
    event = WebhookEvent.objects.get(rail="paypal")
    paypal.reshape(
        "/v1/customer/disputes/", lambda held: {**held, "disputed_transactions": odd}, times=1
    )
    with pytest.raises(RetryableRailError):
        attempt_event(event.pk)
    event.refresh_from_db()
    assert event.processed_at is None and event.last_error.startswith("PayPalUnreadable")
    assert not Dispute.objects.exists()
    # PayPal answering as it does again: recorded.
    assert attempt_event(event.pk).ok
    assert Dispute.objects.get(charge__order=order).status == "needs_response"
