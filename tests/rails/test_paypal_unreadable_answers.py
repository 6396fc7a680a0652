"""PayPal answering what Sill cannot read (a partial outage, a change in its API) is an
unreadable answer: never a crash, never a fact.

Driven through the loopback PayPal (tests/rails/paypal_stub.py), whose ``reshape`` sends an
answer otherwise than PayPal's usual. Seen before: a list in an answer (a page's ``items`` or
``links``, an order's ``purchase_units`` or ``refunds``, a capture's or refund's ``links``) that
was a number raised TypeError out of the rail, and one that was an object or null was read as
an empty list: the sync crashed, or recorded nothing while saying it had read everything; the
facts counted nothing refunded; a refund lookup answered "no such refund", which the attention
recheck takes as leave to fail the refund and release its amount while PayPal holds it. So
did an empty answer, or an order with no purchase unit; and a refund of another shape on the
order (no id, an id Sill's columns cannot hold, no positive amount of a currency Sill knows, a
text field of another type) was left out of the list without a word, or raised
(AttributeError on ``status_details``, DataError on the id).

Now the rail reads PayPal's lists through one helper (sill.rails.paypal.resources), which
raises ``PayPalUnreadable``, the rail's retryable error for an answer it cannot read: the read
counts as not done, nothing is recorded from the answer, and the rail logs it naming the site.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from refunds.reconcile.inbox import catch_up_charge
from sill.money import Money
from sill.orders.models import Dispute, ExternalRefund
from sill.rails.base import (
    RefundFactsRequest,
    RefundRequest,
    RetryableRailError,
)
from sill.rails.paypal.client import PayPalRefused, PayPalUnreadable
from sill.rails.paypal.rail import PayPalRail
from sill.rails.registry import rail_from_account
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET, PayPalStub, StubCapture

pytestmark = pytest.mark.django_db

# What PayPal may send where it means a list: a number, an object, null.
NOT_LISTS = [5, {"rel": "up"}, None]
ODD = ["a-number", "an-object", "null"]

Edit = Callable[[PayPalStub, StubCapture, dict[str, Any]], None]


def _set(path: str, *keys: str, value: Any) -> Edit:
    """An edit of PayPal's answers under ``path``: ``keys`` the way to the field set to ``value``
    (through the first element of each list on the way)."""

    def edit(paypal: PayPalStub, capture: StubCapture, refund: dict[str, Any]) -> None:
        def change(answer: Any) -> Any:
            at = answer
            for key in keys[:-1]:
                at = at[key][0] if isinstance(at[key], list) else at[key]
            at[keys[-1]] = value
            return answer

        paypal.reshape(path, change)

    return edit


LEFT_OUT = object()


def _refund_field(key: str, value: Any) -> Edit:
    """The capture's refund, as PayPal holds it, with ``key`` set to ``value`` (or left out)."""

    def edit(paypal: PayPalStub, capture: StubCapture, refund: dict[str, Any]) -> None:
        if value is LEFT_OUT:
            refund.pop(key)
        else:
            refund[key] = value

    return edit


def _empty_order(paypal: PayPalStub, capture: StubCapture, refund: dict[str, Any]) -> None:
    paypal.reshape(ORDER, lambda answer: None)


ORDER = "/v2/checkout/orders/"
CAPTURE = "/v2/payments/captures/"

# Answers of the capture's refunds that Sill cannot read (its order, the capture naming it).
REFUNDS_UNREADABLE: dict[str, Edit] = {
    **{
        f"order-units-{n}": _set(ORDER, "purchase_units", value=v)
        for n, v in zip(ODD, NOT_LISTS, strict=True)
    },
    **{
        f"order-refunds-{n}": _set(ORDER, "purchase_units", "payments", "refunds", value=v)
        for n, v in zip(ODD, NOT_LISTS, strict=True)
    },
    "order-payments-a-number": _set(ORDER, "purchase_units", "payments", value=5),
    "order-payments-null": _set(ORDER, "purchase_units", "payments", value=None),
    "order-refund-a-number": _set(ORDER, "purchase_units", "payments", "refunds", value=[7]),
    **{
        f"capture-links-{n}": _set(CAPTURE, "links", value=v)
        for n, v in zip(ODD, NOT_LISTS, strict=True)
    },
    **{f"refund-links-{n}": _refund_field("links", v) for n, v in zip(ODD, NOT_LISTS, strict=True)},
    # Of another shape than PayPal's: left out of the list before, or a DataError (the id).
    "order-units-none": _set(ORDER, "purchase_units", value=[]),
    "order-empty-answer": _empty_order,
    "refund-no-id": _refund_field("id", LEFT_OUT),
    "refund-id-a-number": _refund_field("id", 12345),
    "refund-id-an-object": _refund_field("id", {"id": "RF1"}),
    "refund-id-absurdly-long": _refund_field("id", "RF" + "9" * 300),
    "refund-no-amount": _refund_field("amount", LEFT_OUT),
    "refund-amount-a-word": _refund_field("amount", {"value": "ten", "currency_code": "USD"}),
    "refund-amount-negative": _refund_field("amount", {"value": "-10.00", "currency_code": "USD"}),
    "refund-amount-zero": _refund_field("amount", {"value": "0.00", "currency_code": "USD"}),
    "refund-amount-no-currency": _refund_field("amount", {"value": "10.00"}),
    "refund-amount-a-string": _refund_field("amount", "10.00 USD"),
    "refund-custom-id-an-object": _refund_field("custom_id", {"id": "rf_1"}),
    "refund-status-a-number": _refund_field("status", 3),
    # AttributeError before.
    "refund-status-details-a-word": _refund_field("status_details", "ECHECK"),
}


@pytest.fixture
def listed(site, paypal, paypal_account, paypal_order):
    """A capture with a refund made in PayPal (the edits' ``refund``) and an open dispute."""
    order, capture = paypal_order(total="89.00")
    refund = paypal.add_refund(capture, value="10.00")
    paypal.add_dispute(capture, status="OPEN")
    return order, capture, refund


def _rail(account) -> PayPalRail:
    rail = rail_from_account(account)
    assert isinstance(rail, PayPalRail)
    return rail


def _facts(rail: PayPalRail, capture: StubCapture):
    return rail.read_refund_facts(
        RefundFactsRequest(
            provider_charge_id=capture.id,
            currency="USD",
            history_since=datetime.now(UTC) - timedelta(days=90),
        )
    )


def _lookup(capture: StubCapture) -> RefundRequest:
    return RefundRequest(
        refund_id="rf_01K6HXAVBQ8G8PYZKN9JXJEPTN",
        idempotency_key="sill-refund-rf_01K6HXAVBQ8G8PYZKN9JXJEPTN",
        amount=Money(1000, "USD"),
        provider_charge_id=capture.id,
    )


def _said(caplog, site) -> str:
    [line] = [r.getMessage() for r in caplog.records if r.name == "sill.rails.paypal.rail"]
    assert f"site {site.pk}" in line and "cannot read" in line
    assert CLIENT_SECRET not in line and CLIENT_ID not in line
    return line


@pytest.mark.parametrize("edit", REFUNDS_UNREADABLE.values(), ids=REFUNDS_UNREADABLE.keys())
def test_refunds_paypal_answers_unreadable_are_not_read(
    site, paypal, paypal_account, listed, caplog, edit: Edit
):
    order, capture, refund = listed
    edit(paypal, capture, refund)
    rail = _rail(paypal_account)
    charge = order.charges.get()

    # The sync: the capture counts as not read, and nothing is recorded.
    with (
        caplog.at_level(logging.WARNING, logger="sill.rails.paypal.rail"),
        pytest.raises(PayPalUnreadable) as unreadable,
    ):
        catch_up_charge(charge=charge, rail=rail, event_id="t")
    assert isinstance(unreadable.value, RetryableRailError)
    assert not ExternalRefund.objects.exists() and not Dispute.objects.exists()
    assert unreadable.value.message in _said(caplog, site)

    # A decision's facts: what PayPal counts refunded is unknown, never a smaller figure.
    assert _facts(rail, capture).charge_refunded_minor is None
    # A lookup after a timeout: no answer, never "no such refund".
    with pytest.raises(RetryableRailError):
        rail.find_refund(_lookup(capture))


def test_a_refund_paypal_lists_without_a_status_counts_as_refunded(paypal, paypal_account, listed):
    # Seen before: the facts counted it as nothing refunded, the refund list as completed.
    _, capture, refund = listed
    refund.pop("status")
    rail = _rail(paypal_account)
    assert _facts(rail, capture).charge_refunded_minor == 1000
    [read] = rail.list_refunds(capture.id)
    assert (read.amount_minor, read.status) == (1000, "succeeded")


DISPUTES = "/v1/customer/disputes"
DISPUTE_LIST_UNREADABLE: dict[str, Edit] = {
    **{f"items-{n}": _set(DISPUTES, "items", value=v) for n, v in zip(ODD, NOT_LISTS, strict=True)},
    **{f"links-{n}": _set(DISPUTES, "links", value=v) for n, v in zip(ODD, NOT_LISTS, strict=True)},
}


@pytest.mark.parametrize(
    "edit", DISPUTE_LIST_UNREADABLE.values(), ids=DISPUTE_LIST_UNREADABLE.keys()
)
def test_a_dispute_list_paypal_answers_unreadable_is_not_read(
    site, paypal, paypal_account, listed, caplog, edit: Edit
):
    # Seen before: a number raised TypeError out of the sync; an object or null was read as
    # no disputes, the disputes counted as all read, and refunds of the capture not refused.
    order, capture, refund = listed
    edit(paypal, capture, refund)
    rail = _rail(paypal_account)
    with caplog.at_level(logging.WARNING, logger="sill.rails.paypal.rail"):
        with pytest.raises(PayPalUnreadable):
            rail.list_disputes(capture.id)
        _said(caplog, site)
        caplog.clear()
        # The sync records the refunds (another answer) and counts the disputes not read.
        assert catch_up_charge(charge=order.charges.get(), rail=rail, event_id="t") is False
    assert not Dispute.objects.exists()
    assert [r.provider_refund_id for r in ExternalRefund.objects.all()] == [refund["id"]]


def _answer(**fields: Any) -> Callable[[Any], Any]:
    return lambda answer: {**answer, **fields}


@pytest.mark.parametrize(
    ("edit", "status", "raised"),
    [
        # Made, and answered with an id Sill cannot keep: settled under "{'id': 'RF1'}" or
        # "12345" before, or a DataError when settled.
        (_answer(id={"id": "RF1"}), 0, PayPalUnreadable),
        (_answer(id=12345), 0, PayPalUnreadable),
        (_answer(id="RF" + "9" * 300), 0, PayPalUnreadable),
        (_answer(status="FAILED", status_details="ECHECK"), 0, PayPalUnreadable),  # AttributeError
        (_answer(status=["FAILED"]), 0, PayPalUnreadable),  # TypeError
        # An error whose details are a number: TypeError before, whatever the status.
        (lambda answer: {"name": "INTERNAL_SERVER_ERROR", "details": 5}, 500, RetryableRailError),
        (lambda answer: {"name": "UNPROCESSABLE_ENTITY", "details": 5}, 422, PayPalRefused),
        (lambda answer: {"name": "UNPROCESSABLE_ENTITY", "details": [{"issue": 5}]}, 422, PayPalRefused),
        (lambda answer: {"name": "INTERNAL_SERVER_ERROR", "details": [5]}, 503, RetryableRailError),
        (lambda answer: [5], 500, RetryableRailError),
    ],
    ids=[
        "id-an-object", "id-a-number", "id-absurdly-long", "status-details-a-word",
        "status-a-list", "error-details-a-number-500", "error-details-a-number-422",
        "error-issue-a-number", "error-details-a-list-of-numbers", "error-a-list",
    ],
)  # fmt: skip
def test_a_refund_answer_paypal_sends_unreadable_is_an_error_of_the_rail(
    paypal, paypal_account, edit, status: int, raised: type[Exception]
):
    capture = paypal.add_capture(amount="89.00")
    paypal.reshape(f"/v2/payments/captures/{capture.id}/refund", edit, status=status)
    with pytest.raises(raised):
        _rail(paypal_account).refund(_lookup(capture))


def test_a_token_whose_lifetime_is_absurd_is_used_all_the_same(paypal, paypal_account):
    # OverflowError before: an integer past what a float holds.
    capture = paypal.add_capture(amount="89.00")
    paypal.reshape("/v1/oauth2/token", _answer(expires_in=10**400))
    assert _rail(paypal_account).capture(capture.id)["id"] == capture.id
