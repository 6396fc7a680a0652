"""Refunds on PayPal, executed by refunds.execution against the loopback PayPal.

Each refund is a staff refund decided through the real pipeline (create_staff_refund), then
executed the way the refund task executes it (``execute_refund``, again after a RetryLater).
"""

from __future__ import annotations

from datetime import timedelta
from email.utils import format_datetime

import pytest
from django.core import mail
from django.utils import timezone

from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.attention import check_refund_at_rail
from refunds.staff.services import NotRefundable, create_staff_refund
from sill.money import Money
from sill.orders.models import Charge, Order
from tests.worker import wait_for

pytestmark = pytest.mark.django_db


def _refund(site, members, order, capture_callbacks, **kind) -> Refund:
    ensure_default_reasons(site)
    reason = RefundReason.objects.filter(site=site, active=True, code="defective").first()
    with capture_callbacks(execute=False):
        return create_staff_refund(
            site=site,
            order=order,
            actor=members["staff"].user,
            kind=kind.pop("kind", "full"),
            reason=reason,
            **kind,
        )


def settled(site, members, order, capture_callbacks, *, minor: int) -> Refund:
    """A staff refund of ``minor`` USD cents of ``order``, settled at the loopback PayPal."""
    refund = _refund(
        site, members, order, capture_callbacks, kind="amount", amount=Money(minor, "USD")
    )
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    return refund


def _execute(refund: Refund, *, tries: int = 3) -> tuple[Refund, int]:
    """Execute until an outcome; returns the refund and how many attempts said RetryLater."""
    retries = 0
    for _ in range(tries):
        try:
            execute_refund(refund.pk)
            break
        except RetryLater:
            retries += 1
            Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    return Refund.objects.get(pk=refund.pk), retries


def test_it_refunds_the_whole_capture_once_with_the_refund_id_as_request_id(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    [call] = paypal.refund_calls
    assert call["request_id"] == f"sill-refund-{refund.pk}" == refund.idempotency_key
    assert call["body"]["amount"] == {"value": "89.00", "currency_code": "USD"}
    assert call["body"]["custom_id"] == refund.pk
    assert refund.provider_refund_id == capture.refunds[0]["id"]
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"


def test_it_refunds_part_of_a_capture_in_the_currencys_precision(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, _capture = paypal_order(total="89.00")
    refund = _refund(
        site,
        members,
        order,
        django_capture_on_commit_callbacks,
        kind="amount",
        amount=Money(1234, "USD"),
    )
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    assert paypal.refund_calls[0]["body"]["amount"] == {"value": "12.34", "currency_code": "USD"}
    assert Order.objects.get(pk=order.pk).status == "PARTIALLY_REFUNDED"

    yen, _ = paypal_order(total="1500", currency="JPY")
    refund = _refund(
        site,
        members,
        yen,
        django_capture_on_commit_callbacks,
        kind="amount",
        amount=Money(500, "JPY"),
    )
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"
    assert paypal.refund_calls[1]["body"]["amount"] == {"value": "500", "currency_code": "JPY"}


def test_an_unprocessable_refund_fails_with_paypals_issue_in_the_words(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    paypal.fail_next = ["CAPTURE_FULLY_REFUNDED"]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, retries = _execute(refund)
    assert retries == 0
    assert refund.status == "failed"
    assert refund.outcome_code == "already_refunded"
    assert "UNPROCESSABLE_ENTITY: CAPTURE_FULLY_REFUNDED" in refund.failure_message
    assert capture.refunds == []


def test_a_capture_refunded_at_paypal_after_the_decision_is_caught_up_when_paypal_says_so(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    client_for,
    django_capture_on_commit_callbacks,
):
    """Someone refunds the capture in PayPal's dashboard between Sill's decision and its call:
    PayPal answers CAPTURE_FULLY_REFUNDED. The order page went on offering the $89.00 again
    ("Refund again from the form below") and the order stayed Paid until a webhook or a run
    brought the refund in; now Sill reads the capture at once and records what PayPal holds."""
    order, capture = paypal_order()
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    made_outside = paypal.add_refund(capture, value="89.00")
    with django_capture_on_commit_callbacks(execute=True):
        refund, _ = _execute(refund)
    assert (refund.status, refund.outcome_code) == ("failed", "already_refunded")
    assert Order.objects.get(pk=order.pk).status == "REFUNDED"
    charge = Charge.objects.get(order=order)
    assert (charge.amount_refunded_outside_minor, charge.amount_reserved_minor) == (8900, 0)
    staff = client_for("staff")
    page = staff.get(f"/orders/{order.pk}/").content.decode()
    assert "Refund again from the form below" not in page
    assert "the rail already holds a refund or dispute of this payment" in page
    assert "is already refunded in full" in page
    listed = staff.get(f"/orders/{order.pk}/", {"tab": "transactions"}).content.decode()
    assert made_outside["id"] in listed and "Refund outside Sill" in listed
    # Owners and admins are told the same: not "the buyer has not got the money back, refund
    # again", which had them pay the buyer a second time some other way.
    [told, *_] = [m for m in mail.outbox if "Refund failed" in m.subject]
    assert "the buyer has not got the money back" not in told.body
    assert "refundable again" not in told.body
    assert "PayPal already holds a refund or dispute of this payment" in told.body


def test_a_capture_older_than_180_days_is_refused_at_decision_with_nothing_sent(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, _capture = paypal_order(days_ago=181)
    with pytest.raises(NotRefundable, match="refund the buyer in PayPal directly"):
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert not Refund.objects.filter(order=order, status="processing").exists()
    assert paypal.refund_calls == []


def test_a_capture_that_ages_past_180_days_before_execution_is_refused_by_the_rail(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(days_ago=179)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    assert refund.status == "processing"
    capture.created_at -= timedelta(days=2)  # held over a weekend: now 181 days old
    refund, _ = _execute(refund)
    assert (refund.status, refund.outcome_code) == ("failed", "refund_window_passed")
    assert "refund the buyer in PayPal directly" in refund.failure_message
    assert paypal.refund_calls == []


def test_a_timeout_after_paypal_refunded_is_recovered_with_one_refund(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order()
    paypal.fail_next = ["slow"]  # refunds, then answers after 2 s; Sill waits 1 s
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, retries = _execute(refund)
    assert retries == 1
    assert refund.status == "succeeded"
    assert len(capture.refunds) == 1
    # Recovered by reading the capture's order, not by refunding again.
    assert len(paypal.refund_calls) == 1
    assert refund.provider_refund_id == capture.refunds[0]["id"]


def test_a_capture_naming_no_order_is_retried_under_the_same_request_id_with_one_refund(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    """Its refunds cannot be listed, so the lookup after a lost answer cannot look: the retry
    sends the refund again under the same PayPal-Request-Id, which PayPal answers with the
    refund it made."""
    order, capture = paypal_order()
    capture.order_link = False
    paypal.fail_next = ["slow"]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, retries = _execute(refund)
    assert (refund.status, retries) == ("succeeded", 1)
    assert len(capture.refunds) == 1 and len(paypal.refund_calls) == 2
    assert {c["request_id"] for c in paypal.refund_calls} == {refund.idempotency_key}
    assert refund.provider_refund_id == capture.refunds[0]["id"]


def test_a_refund_needing_attention_on_a_capture_naming_no_order_is_never_failed_unseen(
    site, members, paypal, paypal_account, paypal_order, settings,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """The recheck of a refund needing attention only looks up. Where PayPal cannot be asked
    (the capture names no checkout order), "found nothing" used to read as PayPal's word that
    no refund exists: the refund was failed and its amount released while PayPal held it, and
    a second refund of the same money could follow. It stays needing attention."""
    order, capture = paypal_order()
    capture.order_link = False
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    paypal.fail_next = ["slow"]  # PayPal refunds; its answer is lost
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, _ = _execute(refund, tries=1)
    assert refund.status == "needs_attention" and len(capture.refunds) == 1

    assert check_refund_at_rail(refund.pk) == "unknown"
    refund.refresh_from_db()
    assert refund.status == "needs_attention"
    assert "names no checkout order" in refund.failure_message
    assert Charge.objects.get(order=order).amount_reserved_minor == 8900


def test_a_retry_past_180_days_after_an_unseen_attempt_needs_attention_not_failure(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    """The first attempt's answer is lost; by the retry the capture is past PayPal's 180
    days, which Sill checks itself before sending. The refund the first attempt made cannot be
    looked up (no checkout order), so failing it would release money PayPal has refunded."""
    order, capture = paypal_order()
    capture.order_link = False
    paypal.fail_next = ["slow"]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, _ = _execute(refund, tries=1)
    assert refund.status == "processing" and len(capture.refunds) == 1
    capture.created_at -= timedelta(days=180)
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    refund, _ = _execute(refund, tries=1)
    assert (refund.status, refund.outcome_code) == ("needs_attention", "refund_window_passed")
    assert len(paypal.refund_calls) == 1
    assert Charge.objects.get(order=order).amount_reserved_minor == 8900


def test_a_resend_while_paypal_still_works_on_the_first_is_retried_never_failed(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    """The first refund call times out while PayPal is still making the refund; the lookup
    finds no refund yet, so the retry sends the same PayPal-Request-Id again, and PayPal
    answers 409 PREVIOUS_REQUEST_IN_PROGRESS. That was read as a decline: the refund failed
    and its amount was released while PayPal went on to refund the buyer, so a second refund
    of the same money could follow."""
    order, capture = paypal_order()
    paypal.slow_before_refund_seconds = 2.5  # Sill waits 1 s
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as first:
        execute_refund(refund.pk)
    assert first.value.ambiguous and not capture.refunds
    Refund.objects.filter(pk=refund.pk).update(lease_until=None)
    with pytest.raises(RetryLater) as second:
        execute_refund(refund.pk)
    assert second.value.ambiguous and "PREVIOUS_REQUEST_IN_PROGRESS" in str(second.value)
    refund.refresh_from_db()
    assert refund.status == "processing" and refund.outcome_code != "rail_declined"
    assert Charge.objects.get(order=order).amount_reserved_minor == 8900
    wait_for(lambda: len(capture.refunds) == 1, timeout=10)
    refund, _ = _execute(refund)
    assert refund.status == "succeeded" and refund.provider_refund_id == capture.refunds[0]["id"]
    assert len(capture.refunds) == 1
    assert {c["request_id"] for c in paypal.refund_calls} == {refund.idempotency_key}


@pytest.mark.parametrize("issue", ["DUPLICATE_REQUEST_ID", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"])
def test_a_refusal_of_the_request_id_is_never_read_as_a_declined_refund(
    site, members, paypal, paypal_account, paypal_order, issue,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """PayPal's word that the PayPal-Request-Id was used before says an earlier request under
    it exists and may have refunded: the refund is retried under the same id (then needs
    attention if it never clears), never failed with its amount released."""
    order, capture = paypal_order()
    paypal.fail_next = [issue]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.ambiguous
    refund.refresh_from_db()
    assert refund.status == "processing" and not capture.refunds
    assert Charge.objects.get(order=order).amount_reserved_minor == 8900


@pytest.mark.parametrize("failure", ["429", "500"])
def test_a_rate_limit_or_server_error_is_retried_with_the_same_request_id(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    django_capture_on_commit_callbacks,
    failure,
):
    order, capture = paypal_order()
    paypal.fail_next = [failure]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, retries = _execute(refund)
    assert retries == 1
    assert refund.status == "succeeded"
    assert [c["request_id"] for c in paypal.refund_calls] == [refund.idempotency_key] * 2
    assert len(capture.refunds) == 1


@pytest.mark.parametrize(("failure", "outcome"), [("429", "failed"), ("500", "needs_attention")])
def test_retries_used_up_fail_a_refund_paypal_rate_limited_but_not_one_it_answered_5xx(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    settings,
    django_capture_on_commit_callbacks,
    failure,
    outcome,
):
    """A 429 says PayPal did nothing, and the retry's lookup found no refund under the id: the
    refund was not made. A 500 promises no such thing: PayPal may have refunded."""
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 2
    order, capture = paypal_order()
    paypal.fail_next = [failure, failure]
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    refund, retries = _execute(refund)
    assert (retries, refund.status) == (1, outcome)
    assert capture.refunds == []  # the stub made none: only Sill's knowledge differs
    assert Charge.objects.get(order=order).amount_reserved_minor == (
        0 if outcome == "failed" else refund.amount_minor
    )


@pytest.mark.parametrize("failure", ["429", "503"])
def test_a_rate_limit_with_retry_after_is_retried_no_sooner_than_paypal_asked(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    django_capture_on_commit_callbacks,
    failure,
):
    """PayPal's 429 (and a 503 in front of it) says how long to wait: the jittered backoff
    alone sent the refund back within seconds, refused again, an attempt spent each time."""
    order, capture = paypal_order()
    paypal.fail_next, paypal.retry_after = [failure], "30"
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.code == "rail_unavailable"
    assert raised.value.countdown >= 30
    refund.refresh_from_db()
    assert refund.status == "processing" and refund.outcome_code == ""
    assert (refund.next_check_at - timezone.now()).total_seconds() > 25
    assert Charge.objects.get(order=order).amount_reserved_minor == refund.amount_minor
    refund, _ = _execute(refund)
    assert refund.status == "succeeded" and len(capture.refunds) == 1
    assert [c["request_id"] for c in paypal.refund_calls] == [refund.idempotency_key] * 2


def test_a_retry_after_given_as_an_http_date_is_honoured(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, _capture = paypal_order()
    paypal.fail_next = ["429"]
    paypal.retry_after = format_datetime(timezone.now() + timedelta(seconds=90), usegmt=True)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert 85 <= raised.value.countdown <= 91  # the date has whole seconds
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"


@pytest.mark.parametrize("garbage", ["soon", "-30", "nan", "Tuesday"])
def test_a_retry_after_that_says_no_wait_leaves_the_plain_backoff(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    django_capture_on_commit_callbacks,
    settings,
    garbage,
):
    order, _capture = paypal_order()
    settings.SILL_EXECUTION_BACKOFF_BASE_SECONDS = 2
    paypal.fail_next, paypal.retry_after = ["429"], garbage
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.countdown <= 2  # the first backoff: uniform in [0, 2]
    refund, _ = _execute(refund)
    assert refund.status == "succeeded"


def test_a_retry_after_of_days_waits_no_longer_than_the_backoff_cap(
    site,
    members,
    paypal,
    paypal_account,
    paypal_order,
    django_capture_on_commit_callbacks,
    settings,
):
    """A broken or hostile server must not park a refund for a week."""
    order, _capture = paypal_order()
    settings.SILL_EXECUTION_BACKOFF_CAP_SECONDS = 300
    paypal.fail_next, paypal.retry_after = ["429"], str(7 * 24 * 3600)
    refund = _refund(site, members, order, django_capture_on_commit_callbacks)
    with pytest.raises(RetryLater) as raised:
        execute_refund(refund.pk)
    assert raised.value.countdown == 300
    refund.refresh_from_db()
    assert (refund.next_check_at - timezone.now()).total_seconds() < 301


def test_the_token_is_fetched_once_and_again_when_paypal_drops_it(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    for _ in range(2):
        order, _capture = paypal_order()
        refund, _ = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
        assert refund.status == "succeeded"
    assert paypal.token_requests == 1
    paypal.expire_tokens()
    order, _capture = paypal_order()
    refund, _ = _execute(_refund(site, members, order, django_capture_on_commit_callbacks))
    assert refund.status == "succeeded"
    assert paypal.token_requests == 2
