"""The mock rail behaves like a provider: idempotent, scriptable, and it remembers."""

from __future__ import annotations

import pytest

from sill.money import Money
from sill.rails.base import (
    AmbiguousRailError,
    ChargeRequest,
    PermanentRailError,
    Rail,
    RefundRequest,
    RetryableRailError,
)
from sill.rails.mock import MockRail
from sill.rails.models import MockLedgerEntry

SITE = "01TESTSITE0000000000000001"

pytestmark = pytest.mark.django_db


def usd(minor: int) -> Money:
    return Money(minor, "USD")


def charge(rail: MockRail, minor: int = 8900, key: str = "sill-charge-ord_1") -> str:
    result = rail.charge(
        ChargeRequest(
            order_id="ord_1", amount=usd(minor), payment_method="pm_card_visa", idempotency_key=key
        )
    )
    return result.provider_charge_id


def refund_request(charge_id: str, minor: int, refund_id: str = "rf_1") -> RefundRequest:
    return RefundRequest(
        refund_id=refund_id,
        idempotency_key=f"sill-refund-{refund_id}",
        amount=usd(minor),
        provider_charge_id=charge_id,
    )


def test_it_implements_the_protocol():
    assert isinstance(MockRail(site_id=SITE), Rail)


def test_it_charges_once_per_key():
    rail = MockRail(site_id=SITE)
    request = ChargeRequest(
        order_id="ord_1", amount=usd(8900), payment_method="pm_card_visa", idempotency_key="k1"
    )

    first = rail.charge(request)
    again = rail.charge(request)

    assert first.provider_payment_id.startswith("mock_pi_")
    assert first.provider_charge_id.startswith("mock_ch_")
    assert again == first
    assert MockLedgerEntry.objects.filter(kind="charge").count() == 1


def test_it_refunds():
    rail = MockRail(site_id=SITE)
    charge_id = charge(rail)

    result = rail.refund(refund_request(charge_id, 8900))

    assert result.provider_refund_id.startswith("mock_re_")
    assert result.state == "succeeded"
    assert result.amount == usd(8900)
    entry = MockLedgerEntry.objects.get(kind="refund")
    assert entry.provider_charge_id == charge_id
    assert entry.metadata["sill_refund_id"] == "rf_1"


def test_it_returns_the_same_refund_for_the_same_key():
    rail = MockRail(site_id=SITE)
    charge_id = charge(rail)

    first = rail.refund(refund_request(charge_id, 1000))
    again = rail.refund(refund_request(charge_id, 1000))

    assert again == first
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_it_refuses_a_reused_key_with_another_amount():
    rail = MockRail(site_id=SITE)
    charge_id = charge(rail)
    rail.refund(refund_request(charge_id, 1000))

    with pytest.raises(PermanentRailError, match="different parameters"):
        rail.refund(refund_request(charge_id, 2000))


def test_it_refuses_an_over_refund_of_a_known_charge():
    rail = MockRail(site_id=SITE)
    charge_id = charge(rail, 8900)
    rail.refund(refund_request(charge_id, 5000, "rf_1"))

    with pytest.raises(PermanentRailError, match="exceeds"):
        rail.refund(refund_request(charge_id, 4000, "rf_2"))

    assert rail.refund(refund_request(charge_id, 3900, "rf_3")).amount == usd(3900)


def test_it_allows_refunds_of_charges_it_never_made():
    rail = MockRail(site_id=SITE)

    result = rail.refund(refund_request("ch_test_demo", 999_999))

    assert result.state == "succeeded"


def test_it_declines_when_scripted():
    rail = MockRail(site_id=SITE, config={"refund": "decline", "charge": "decline"})

    with pytest.raises(PermanentRailError):
        charge(rail)
    with pytest.raises(PermanentRailError):
        rail.refund(refund_request("ch_test_demo", 100))
    assert not MockLedgerEntry.objects.exists()


def test_it_declines_stripe_declining_test_cards():
    rail = MockRail(site_id=SITE)

    with pytest.raises(PermanentRailError):
        rail.charge(
            ChargeRequest(
                order_id="o",
                amount=usd(100),
                payment_method="pm_card_visa_chargeDeclined",
                idempotency_key="k",
            )
        )


def test_it_times_out_without_effect():
    rail = MockRail(site_id=SITE, config={"refund": "timeout"})
    request = refund_request("ch_test_demo", 100)

    with pytest.raises(AmbiguousRailError) as caught:
        rail.refund(request)

    assert caught.value.ambiguous and caught.value.retryable
    assert rail.find_refund(request) is None
    assert not MockLedgerEntry.objects.exists()


def test_it_times_out_after_the_effect_and_find_refund_recovers_it():
    rail = MockRail(site_id=SITE, config={"refund": "timeout_after_effect"})
    request = refund_request("ch_test_demo", 100)

    with pytest.raises(AmbiguousRailError):
        rail.refund(request)

    found = rail.find_refund(request)
    assert found is not None
    assert found.provider_refund_id.startswith("mock_re_")
    assert found.amount == usd(100)
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_it_fails_only_the_first_n_calls_per_key():
    config = {"refund": "timeout_after_effect", "fail_times": 1}
    request = refund_request("ch_test_demo", 100)

    with pytest.raises(AmbiguousRailError):
        MockRail(site_id=SITE, config=config).refund(request)
    # A new instance, as in another worker process: the count lives in the database.
    result = MockRail(site_id=SITE, config=config).refund(request)

    assert result == MockRail(site_id=SITE).find_refund(request)
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    with pytest.raises(AmbiguousRailError):
        MockRail(site_id=SITE, config=config).refund(refund_request("ch_test_demo", 100, "rf_2"))


def test_it_is_rate_limited_when_scripted():
    rail = MockRail(site_id=SITE, config={"refund": "rate_limited"})

    with pytest.raises(RetryableRailError) as caught:
        rail.refund(refund_request("ch_test_demo", 100))

    assert caught.value.retryable and not caught.value.ambiguous
    assert not MockLedgerEntry.objects.exists()


def test_it_times_out_charges_when_scripted():
    rail = MockRail(site_id=SITE, config={"charge": "timeout"})

    with pytest.raises(AmbiguousRailError):
        charge(rail)


def test_it_waits_after_recording(monkeypatch):
    # What a kill-the-worker test relies on: the refund exists while the rail is "slow".
    entries_while_sleeping: list[int] = []
    monkeypatch.setattr(
        "sill.rails.mock.time.sleep",
        lambda seconds: entries_while_sleeping.append(MockLedgerEntry.objects.count()),
    )
    rail = MockRail(site_id=SITE, config={"delay_seconds": 0.25})

    rail.refund(refund_request("ch_test_demo", 100))

    assert entries_while_sleeping == [1]


def test_it_keeps_sites_apart():
    request = refund_request("ch_test_demo", 100)
    MockRail(site_id=SITE).refund(request)

    assert MockRail(site_id="01TESTSITE0000000000000002").find_refund(request) is None


def test_it_refuses_unknown_scripts():
    with pytest.raises(ValueError):
        MockRail(site_id=SITE, config={"refund": "explode"})
