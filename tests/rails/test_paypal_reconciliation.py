"""Reconciliation of PayPal captures: the rail lists a capture's refunds (its checkout order's
``payments.refunds``) and disputes (Customer Disputes v1), so a run compares them with Sill's
books as it does Stripe's, through the loopback PayPal (tests/rails/paypal_stub.py).

Seen before: reconciliation covered Stripe only. A refund made in PayPal's dashboard whose
webhook never came, or a refund Sill settled that PayPal does not have, was never found.
"""

from __future__ import annotations

import logging

import pytest
from django.db.models import F

from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.inbox import catch_up_charge
from refunds.reconcile.runs import run_reconciliation
from sill.errors import SillError
from sill.money import Money
from sill.orders.models import Charge, Dispute, ExternalRefund
from sill.rails.registry import rail_from_account
from tests.rails.paypal_stub import CLIENT_ID, CLIENT_SECRET
from tests.rails.test_paypal_refunds import _execute, _refund

pytestmark = pytest.mark.django_db


def _run(account) -> ReconciliationRun:
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.error == ""
    assert run.charges_unreadable == 0, "a capture could not be read"
    return run


def test_a_refund_made_in_paypal_without_its_webhook_is_recorded_and_shown(
    site, paypal, paypal_account, paypal_order
):
    order, capture = paypal_order(total="89.00")
    status, made = paypal.refund(
        capture, {"amount": {"value": "20.00", "currency_code": "USD"}}, ""
    )
    assert status == 201
    run = _run(paypal_account)
    assert (run.charges_checked, run.items_opened) == (1, 1)
    [item] = ReconciliationItem.objects.filter(order=order)
    assert (item.kind, item.provider_refund_id, item.sill_corrected) == (
        "missing_in_sill", made["id"], True,
    )  # fmt: skip
    assert (item.rail, item.rail_amount_minor) == ("paypal", 2000)
    outside = ExternalRefund.objects.get(charge__order=order)
    assert (outside.provider_refund_id, outside.counted_minor) == (made["id"], 2000)
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 2000


def test_sills_own_refunds_agree_and_one_paypal_lacks_is_in_sill_not_at_the_rail(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, _ = paypal_order(total="89.00")
    made = _refund(
        site, members, order, django_capture_on_commit_callbacks,
        kind="amount", amount=Money(1000, "USD"),
    )  # fmt: skip
    assert _execute(made)[0].status == "succeeded"
    _run(paypal_account)
    assert not ReconciliationItem.objects.exists()  # the books agree

    # A refund Sill counts as settled that PayPal never made.
    phantom = Refund.objects.create(
        site=site, order=order, charge=order.charges.get(), origin="staff",
        amount_minor=500, currency="USD", rail="paypal", decision="approved",
        status="succeeded", provider_refund_id="RFNEVERMADE01",
    )  # fmt: skip
    Charge.objects.filter(order=order).update(
        amount_refunded_minor=F("amount_refunded_minor") + 500
    )
    _run(paypal_account)
    [item] = ReconciliationItem.objects.filter(order=order)
    assert (item.kind, item.refund_id, item.sill_amount_minor) == (
        "missing_at_rail", phantom.pk, 500,
    )  # fmt: skip
    assert "PayPal lists no such refund" in item.detail


def test_disputes_are_read_with_a_resolved_ones_outcome(site, paypal, paypal_account, paypal_order):
    order, capture = paypal_order(total="89.00")
    paypal.add_dispute(capture, status="OPEN")
    won = paypal.add_dispute(capture, status="RESOLVED", outcome="RESOLVED_SELLER_FAVOUR")
    _run(paypal_account)
    recorded = {d.provider_dispute_id: d for d in Dispute.objects.filter(charge__order=order)}
    assert len(recorded) == 2
    assert recorded[won["dispute_id"]].status == "won"
    assert recorded[won["dispute_id"]].rail_status == "RESOLVED:RESOLVED_SELLER_FAVOUR"
    [still_open] = [d for key, d in recorded.items() if key != won["dispute_id"]]
    assert still_open.status == "needs_response"
    # Both were missed (no webhook came): each waits in the inbox for a person, in words.
    items = {i.key: i for i in ReconciliationItem.objects.filter(order=order)}
    assert set(items) == {f"missing_in_sill:{key}" for key in recorded}
    opened = items[f"missing_in_sill:{still_open.provider_dispute_id}"]
    assert opened.sill_corrected and opened.provider_refund_id == ""
    assert (opened.rail_amount_minor, opened.rail_status) == (8900, "OPEN")
    assert f"A dispute at PayPal ({still_open.provider_dispute_id}, needs response)" in (
        opened.detail
    )
    assert "every refund of the charge is refused" in opened.detail
    # Seen again, nothing new opens, and Sill does not clear them: a person acknowledges them.
    run = _run(paypal_account)
    assert (run.items_opened, run.items_cleared) == (0, 0)
    assert ReconciliationItem.objects.filter(order=order, resolved_at__isnull=True).count() == 2


def test_a_dispute_sill_already_has_opens_no_item(site, paypal, paypal_account, paypal_order):
    order, capture = paypal_order(total="89.00")
    listed = paypal.add_dispute(capture, status="OPEN")
    Dispute.objects.create(
        charge=order.charges.get(), provider_dispute_id=listed["dispute_id"], reason="general",
        amount_minor=8900, currency="USD", status="needs_response",
        opened_at=order.created_at, rail_status="OPEN",
    )  # fmt: skip
    assert _run(paypal_account).items_opened == 0
    assert not ReconciliationItem.objects.exists()


def test_a_capture_paypal_cannot_read_is_counted_and_changes_nothing(
    site, paypal, paypal_account, paypal_order
):
    order, _ = paypal_order(total="89.00")
    Charge.objects.filter(order=order).update(provider_charge_id="NOSUCHCAPTURE")
    run = run_reconciliation(account_id=paypal_account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 1)
    assert not ReconciliationItem.objects.exists() and not ExternalRefund.objects.exists()


def test_a_refund_decision_records_a_refund_paypal_reports_before_its_webhook(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    order, capture = paypal_order(total="89.00")
    paypal.refund(capture, {"amount": {"value": "30.00", "currency_code": "USD"}}, "")
    with pytest.raises(SillError, match=r"At most \$59\.00"):
        _refund(
            site, members, order, django_capture_on_commit_callbacks,
            kind="amount", amount=Money(6000, "USD"),
        )  # fmt: skip
    [outside] = ExternalRefund.objects.filter(charge__order=order)
    assert outside.counted_minor == 3000 and paypal.refund_calls == []


def test_disputes_past_one_page_are_all_read(site, paypal, paypal_account, paypal_order):
    # Seen before: one page of 50 was read and its ``next`` link ignored, so a dispute past
    # it was never recorded and refunds of the capture were not refused.
    order, capture = paypal_order(total="89.00")
    for _ in range(51):
        paypal.add_dispute(capture, status="OPEN")
    _run(paypal_account)
    assert Dispute.objects.filter(charge__order=order).count() == 51


def test_a_dispute_of_an_unreadable_amount_is_recorded_and_logged_naming_the_site(
    site, paypal, paypal_account, paypal_order, caplog
):
    # Seen before: such a dispute was skipped without a word, so on-call reading the worker's
    # log could not tell why a dispute PayPal shows was never recorded. It is now recorded,
    # its amount not known (tests/rails/test_dispute_amount_unknown.py), and still said.
    order, capture = paypal_order(total="89.00")
    unreadable = paypal.add_dispute(capture, status="OPEN", value="89.001")
    readable = paypal.add_dispute(capture, status="OPEN")
    with caplog.at_level(logging.WARNING, logger="sill.rails.paypal.rail"):
        _run(paypal_account)
    recorded = Dispute.objects.filter(charge__order=order).order_by("provider_dispute_id")
    assert [(d.provider_dispute_id, d.amount_minor) for d in recorded] == [
        (unreadable["dispute_id"], None), (readable["dispute_id"], 8900),
    ]  # fmt: skip
    [line] = [r.getMessage() for r in caplog.records if r.name == "sill.rails.paypal.rail"]
    assert f"site {site.pk}" in line and unreadable["dispute_id"] in line
    assert capture.id in line and "'89.001'" in line
    assert "recorded with its amount not known" in line
    assert CLIENT_SECRET not in line and CLIENT_ID not in line
    # Recorded, its amount not known, so Sill's list is PayPal's whole list: a decision's
    # catch-up reads the disputes as read, and the recorded one refuses refunds.
    charge = Charge.objects.get(order=order)
    rail = rail_from_account(paypal_account)
    assert catch_up_charge(charge=charge, rail=rail, event_id="decision:test") is True


def test_a_dispute_sill_cannot_record_is_logged_and_the_others_are_recorded(
    site, paypal, paypal_account, paypal_order, caplog
):
    # Seen before: one dispute the books cannot hold (here an id longer than Sill keeps) ended
    # the capture's read: the disputes listed after it were never recorded, and refunds of the
    # capture were not refused; the run logged only that the charge failed.
    order, capture = paypal_order(total="89.00")
    odd = paypal.add_dispute(capture, status="OPEN")
    paypal.disputes.pop(odd["dispute_id"])
    odd["dispute_id"] = "PP-D-" + "9" * 300
    paypal.put_dispute(odd)
    listed_after = paypal.add_dispute(capture, status="OPEN")
    charge = Charge.objects.get(order=order)

    with caplog.at_level(logging.WARNING, logger="sill.rails.charge_sync"):
        _run(paypal_account)  # the capture is read: not counted unreadable
    assert [d.provider_dispute_id for d in Dispute.objects.filter(charge=charge)] == [
        listed_after["dispute_id"]
    ]
    [line] = [r.getMessage() for r in caplog.records if r.name == "sill.rails.charge_sync"]
    assert line.startswith("dispute PP-D-999") and f"charge {charge.pk} of site {site.pk}" in line
    # A decision's catch-up is told the disputes were not all recorded, so the rail's own
    # "disputed" is not overruled by Sill's incomplete list.
    rail = rail_from_account(paypal_account)
    assert catch_up_charge(charge=charge, rail=rail, event_id="decision:test") is False


def test_a_dispute_in_another_currency_is_recorded_in_its_own_and_refuses_refunds(
    site, members, paypal, paypal_account, paypal_order, django_capture_on_commit_callbacks
):
    # PayPal states a dispute's amount in the buyer's currency, which may not be the
    # capture's. Recorded all the same (it stops refunds), its amount in its own currency; the
    # inbox item is of the charge's books (USD), the rail's side in euros, and says so.
    order, capture = paypal_order(total="89.00")
    listed = paypal.add_dispute(capture, status="OPEN")
    listed["dispute_amount"] = {"currency_code": "EUR", "value": "80.00"}
    paypal.put_dispute(listed)
    _run(paypal_account)
    dispute = Dispute.objects.get(charge__order=order)
    assert (dispute.amount_minor, dispute.currency) == (8000, "EUR")
    assert Charge.objects.get(order=order).amount_refunded_outside_minor == 0
    [item] = ReconciliationItem.objects.filter(order=order)
    assert (item.currency, item.rail_amount_minor, item.rail_currency) == ("USD", 8000, "EUR")
    assert "€80.00, in another currency than the charge's" in item.detail
    with pytest.raises(SillError, match="disputed"):
        _refund(site, members, order, django_capture_on_commit_callbacks)
    assert paypal.refund_calls == []


@pytest.mark.parametrize("status", ["404", "500", "503"])
def test_a_resolved_dispute_whose_details_cannot_be_read_is_recorded_as_listed(
    site, paypal, paypal_account, paypal_order, caplog, status
):
    # Seen before: the details read failing ended the whole list, and none of the capture's
    # disputes was recorded (the open one beside it neither), refunds of it not refused.
    order, capture = paypal_order(total="89.00")
    resolved = paypal.add_dispute(capture, status="RESOLVED", outcome="RESOLVED_SELLER_FAVOUR")
    still_open = paypal.add_dispute(capture, status="OPEN")
    paypal.fail_next_lookup = [status]
    charge = order.charges.get()
    with caplog.at_level(logging.WARNING, logger="sill.rails.paypal.rail"):
        read = catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="t")
    # Its outcome unknown, the resolved one is recorded as the list says: RESOLVED alone, lost,
    # refusing refunds. The disputes count as not all read.
    assert read is False
    recorded = {
        d.provider_dispute_id: (d.status, d.rail_status, d.amount_minor)
        for d in Dispute.objects.filter(charge=charge)
    }
    assert recorded == {
        resolved["dispute_id"]: ("lost", "RESOLVED", 8900),
        still_open["dispute_id"]: ("needs_response", "OPEN", 8900),
    }
    [line] = [r.getMessage() for r in caplog.records if r.name == "sill.rails.paypal.rail"]
    assert f"site {site.pk}" in line and resolved["dispute_id"] in line and capture.id in line
    assert CLIENT_SECRET not in line

    # Read again once PayPal answers: its outcome, and the disputes all read.
    assert catch_up_charge(charge=charge, rail=rail_from_account(paypal_account), event_id="u")
    won = Dispute.objects.get(provider_dispute_id=resolved["dispute_id"])
    assert (won.status, won.rail_status) == ("won", "RESOLVED:RESOLVED_SELLER_FAVOUR")
