"""The PayPal rail on its own: building it, its facts, its window, what its errors hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from sill.money import Money
from sill.rails.base import (
    RefundFactsRequest,
    RefundRequest,
    RefundWindowPassed,
    RetryableRailError,
)
from sill.rails.paypal.client import SANDBOX_API
from sill.rails.paypal.rail import PayPalRail
from sill.rails.registry import RailDisabled, rail_for, rail_from_account
from tests.rails.paypal_stub import CLIENT_SECRET

pytestmark = pytest.mark.django_db


def _request(capture_id: str, minor: int = 8900) -> RefundRequest:
    return RefundRequest(
        refund_id="rfd_TEST1",
        idempotency_key="sill-refund-rfd_TEST1",
        amount=Money(minor, "USD"),
        provider_charge_id=capture_id,
    )


def test_it_talks_to_the_sandbox_unless_told_otherwise(paypal_account):
    paypal_account.api_base = ""
    rail = rail_from_account(paypal_account)
    assert isinstance(rail, PayPalRail)
    assert rail.client.api_base == SANDBOX_API
    assert rail.refund_window_days == 180
    assert CLIENT_SECRET not in repr(rail)


def test_live_mode_needs_sill_allow_live(paypal_account, settings):
    paypal_account.mode = "live"
    paypal_account.save()
    settings.SILL_ALLOW_LIVE = False
    with pytest.raises(RailDisabled) as refused:
        rail_for(site_id=paypal_account.site_id, rail="paypal")
    assert refused.value.code == "rail_disabled"
    assert "SILL_ALLOW_LIVE" in refused.value.message
    settings.SILL_ALLOW_LIVE = True
    paypal_account.api_base = ""
    rail = rail_from_account(paypal_account)
    assert isinstance(rail, PayPalRail)
    assert rail.client.api_base == "https://api-m.paypal.com"


def test_without_credentials_the_rail_is_disabled_with_words(paypal_account):
    paypal_account.config = {}
    paypal_account.save()
    with pytest.raises(RailDisabled, match="connect PayPal"):
        rail_from_account(paypal_account)


def test_it_reports_the_capture_time_and_what_paypal_refunded(paypal, paypal_account):
    capture = paypal.add_capture(amount="50.00", days_ago=10)
    rail = rail_from_account(paypal_account)
    assert isinstance(rail, PayPalRail)
    rail.refund(_request(capture.id, 1500))
    facts = rail.read_refund_facts(
        RefundFactsRequest(
            provider_charge_id=capture.id,
            currency="USD",
            history_since=datetime.now(UTC) - timedelta(days=90),
        )
    )
    assert facts.charge_created_at == capture.created_at.replace(microsecond=0)
    assert facts.charge_refunded_minor == 1500
    assert facts.live_money is False
    assert rail.window_passed(capture.created_at) is False
    assert rail.window_passed(capture.created_at, now=capture.created_at + timedelta(days=181))


def test_the_same_request_id_answers_the_same_refund(paypal, paypal_account):
    capture = paypal.add_capture()
    rail = rail_from_account(paypal_account)
    first = rail.refund(_request(capture.id, 1000))
    again = rail.refund(_request(capture.id, 1000))
    assert first == again
    assert len(capture.refunds) == 1
    assert rail.find_refund(_request(capture.id, 1000)) == first
    other = RefundRequest(
        refund_id="rfd_OTHER",
        idempotency_key="sill-refund-rfd_OTHER",
        amount=Money(1000, "USD"),
        provider_charge_id=capture.id,
    )
    assert rail.find_refund(other) is None


def test_paypals_own_window_refusal_is_refund_window_passed(paypal, paypal_account):
    capture = paypal.add_capture()
    paypal.fail_next = ["REFUND_TIME_LIMIT_EXCEEDED"]
    rail = rail_from_account(paypal_account)
    with pytest.raises(RefundWindowPassed) as refused:
        rail.refund(_request(capture.id))
    assert refused.value.code == "refund_window_passed"
    assert "REFUND_TIME_LIMIT_EXCEEDED" in refused.value.message
    assert "in PayPal directly" in refused.value.message


@pytest.mark.parametrize(
    ("failure", "header", "waits"),
    [
        ("429", "30", 30),
        ("503", "120", 120),
        ("429", "2.5", 2.5),
        ("429", "in 600 s", 600),  # an HTTP-date, made when the test runs
        ("429", "Tue, 01 Jan 2019 00:00:00 GMT", 0),  # already passed: no wait
        ("429", str(3 * 24 * 3600), 3600),  # a broken server's days: an hour at most
        ("429", "soon", None),
        ("429", "-30", None),
        ("429", "inf", None),
        ("429", "", None),
        ("500", "", None),
    ],
)
def test_a_refusal_to_retry_later_says_how_long_paypal_asked_to_wait(
    paypal, paypal_account, failure, header, waits
):
    capture = paypal.add_capture()
    if header.startswith("in "):
        when = datetime.now(UTC) + timedelta(seconds=int(header.split()[1]))
        header = format_datetime(when, usegmt=True)
    paypal.fail_next, paypal.retry_after = [failure], header
    with pytest.raises(RetryableRailError) as refused:
        rail_from_account(paypal_account).refund(_request(capture.id))
    assert refused.value.code == "rail_unavailable"
    if waits is None:
        assert refused.value.retry_after is None
    else:
        assert refused.value.retry_after == pytest.approx(waits, abs=2)
    assert capture.refunds == []


def test_a_wrong_secret_is_permanent_and_never_quoted(paypal, paypal_account):
    paypal_account.set_secret("WRONG" + CLIENT_SECRET)
    paypal_account.save()
    capture = paypal.add_capture()
    rail = rail_from_account(paypal_account)
    with pytest.raises(Exception) as refused:
        rail.refund(_request(capture.id))
    assert getattr(refused.value, "code", "") == "rail_auth_failed"
    assert CLIENT_SECRET not in str(refused.value)
    assert paypal.refund_calls == []
