"""Staff refunds through the pipeline: each type, each status rule, each reason rule, rounding."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core import mail

from audit.models import AuditRecord
from refunds.models import Refund, RefundReason
from refunds.reasons.selectors import PATH_SEPARATOR
from refunds.reasons.services import add_reason, ensure_default_reasons, set_reason_active
from refunds.staff.services import (
    OrderSnapshot,
    create_staff_refund,
    parse_percentage,
    percentage_of_total,
    quote_staff_refund,
)
from sill.errors import SillError
from sill.money import Money, format_money, parse_major
from sill.orders.models import Charge, Order
from sill.rails.models import MockLedgerEntry, RailAccount
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def reasons(site):
    ensure_default_reasons(site)
    product = add_reason(site=site, actor=site_owner(site), name="Product problem")
    broken = add_reason(site=site, actor=site_owner(site), name="Arrived broken", parent=product)
    defective = RefundReason.objects.get(site=site, code="defective")
    worn = add_reason(site=site, actor=site_owner(site), name="Worn out early", parent=defective)
    return {"product": product, "broken": broken, "defective": defective, "worn": worn}


@pytest.fixture
def staff(members):
    return members["staff"].user


@pytest.fixture
def refund(site, staff, reasons, mock_rail, django_capture_on_commit_callbacks):
    """``refund(order, kind=..., ...)``: a staff refund, with its on-commit execution run."""

    def make(order: Order, **kwargs) -> Refund:
        kwargs.setdefault("kind", "full")
        kwargs.setdefault("reason", reasons["broken"])
        kwargs.setdefault("note", "")
        with django_capture_on_commit_callbacks(execute=True):
            created = create_staff_refund(site=site, order=order, actor=staff, **kwargs)
        created.refresh_from_db()
        return created

    return make


def _state(order: Order) -> tuple[str, int, int]:
    order.refresh_from_db()
    charge = Charge.objects.get(order=order)
    return order.status, charge.amount_refunded_minor, charge.amount_reserved_minor


def _nothing_written(site) -> None:
    assert Refund.objects.count() == 0
    assert not AuditRecord.objects.filter(site=site).exclude(kind="reason_change").exists()
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0


# --- the three kinds -------------------------------------------------------------------------


def test_a_full_refund_refunds_what_remains_and_runs_the_whole_pipeline(
    site, make_order, refund, staff
):
    order = make_order(total="89.00")
    made = refund(order, kind="full", note="Customer called")
    assert (made.status, made.amount_minor, made.origin) == ("succeeded", 8900, "staff")
    assert made.provider_refund_id.startswith("mock_re_")
    assert made.requested_by == staff and made.note == "Customer called"
    assert made.reason_path == f"Product problem{PATH_SEPARATOR}Arrived broken"
    assert made.reason_label == "Arrived broken"
    assert _state(order) == ("REFUNDED", 8900, 0)
    kinds = list(AuditRecord.objects.filter(site=site).values_list("kind", flat=True))
    assert kinds[-2:] == ["approved", "settlement"]
    decision = json.loads(AuditRecord.objects.get(site=site, kind="approved").payload)["body"]
    assert decision["origin"] == "staff" and decision["requested_by"] == staff.get_username()
    assert decision["facts"]["refundOrigin"] == "staff"
    assert [m.to for m in mail.outbox] == [["buyer@example.com"]]
    assert "$89.00" in mail.outbox[0].body


def test_a_fixed_amount_refund_leaves_the_rest_refundable(make_order, refund):
    order = make_order(total="89.00")
    made = refund(order, kind="amount", amount=parse_major("15.00", "USD"))
    assert made.amount_minor == 1500
    assert _state(order) == ("PARTIALLY_REFUNDED", 1500, 0)
    assert Charge.objects.get(order=order).remaining == Money(7400, "USD")


@pytest.mark.parametrize(
    ("amount", "code", "message"),
    [
        ("0.00", "invalid_field", "more than zero"),
        ("-1.00", "invalid_field", "more than zero"),
        ("89.01", "exceeds_refundable", "At most $89.00 can be refunded"),
    ],
)
def test_a_fixed_amount_must_be_positive_and_at_most_what_remains(
    site, make_order, refund, amount, code, message
):
    order = make_order(total="89.00")
    with pytest.raises(SillError) as exc:
        refund(order, kind="amount", amount=parse_major(amount, "USD"))
    assert exc.value.code == code and message in exc.value.message
    assert exc.value.field == "amount" and exc.value.status == 400
    _nothing_written(site)


def test_too_much_after_a_partial_refund_names_the_new_maximum(make_order, refund):
    order = make_order(total="89.00")
    refund(order, kind="amount", amount=parse_major("50.00", "USD"))
    with pytest.raises(SillError, match=r"At most \$39\.00 can be refunded"):
        refund(order, kind="amount", amount=parse_major("40.00", "USD"))


def test_a_fixed_amount_in_another_currency_is_refused(make_order, refund):
    with pytest.raises(SillError, match="in USD"):
        refund(make_order(), kind="amount", amount=parse_major("5.00", "EUR"))


def test_a_percentage_refund_is_of_the_order_total(make_order, refund):
    order = make_order(total="89.00")
    made = refund(order, kind="percentage", percentage=Decimal("25"))
    assert made.amount == Money(2225, "USD")
    assert _state(order) == ("PARTIALLY_REFUNDED", 2225, 0)
    # Still of the total (not of what remains) the second time.
    assert refund(order, kind="percentage", percentage=Decimal("25")).amount_minor == 2225


# --- rounding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "currency", "percentage", "expected", "shown"),
    [
        # Half up to the cent: 5.005 → 5.01, 0.125 → 0.13 (banker's rounding would say 0.12).
        ("10.01", "USD", "50", 501, "$5.01"),
        ("0.25", "USD", "50", 13, "$0.13"),
        ("89.00", "USD", "33.33", 2966, "$29.66"),  # 29.6637 → 29.66
        ("89.00", "USD", "12.5", 1113, "$11.13"),  # 11.125 → 11.13
        # Whole yen: 500.5 → 501, 124.875 → 125, 1,234.4 → 1,234.
        ("1001", "JPY", "50", 501, "¥501"),
        ("999", "JPY", "12.5", 125, "¥125"),
        ("12344", "JPY", "10", 1234, "¥1,234"),
        # Fils (three decimals): 0.5005 → 0.501, 1.2345 → 1.235, 3.3329 → 3.333.
        ("1.001", "KWD", "50", 501, "KWD 0.501"),
        ("12.345", "KWD", "10", 1235, "KWD 1.235"),
        ("10.000", "KWD", "33.33", 3333, "KWD 3.333"),
    ],
)
def test_percentages_round_half_up_to_the_currencys_minor_unit(
    make_order, refund, total, currency, percentage, expected, shown
):
    pct = parse_percentage(percentage)
    total_money = parse_major(total, currency)
    result = percentage_of_total(total=total_money, percentage=pct, remaining=total_money)
    assert result.amount == Money(expected, currency) and not result.capped
    assert format_money(result.amount) == shown
    # ...and the refund made from the order page is exactly that amount.
    made = refund(make_order(total=total, currency=currency), kind="percentage", percentage=pct)
    assert (made.amount_minor, made.currency) == (expected, currency)


def test_a_percentage_is_capped_at_what_remains(make_order, refund):
    order = make_order(total="89.00")
    refund(order, kind="percentage", percentage=Decimal("60"))  # 53.40
    charge = Charge.objects.get(order=order)
    quote = quote_staff_refund(
        order=order, charge=charge, kind="percentage", percentage=Decimal(50)
    )
    assert quote.amount == Money(3560, "USD")
    assert "capped at the $35.60 left to refund" in quote.explanation
    made = refund(order, kind="percentage", percentage=Decimal("50"))
    assert made.amount_minor == 3560
    assert _state(order) == ("REFUNDED", 8900, 0)


@pytest.mark.parametrize("value", ["0", "-5", "100.01", "abc", "12.345", "", None, 25.0, "NaN"])
def test_a_percentage_is_more_than_0_at_most_100_with_two_decimals(value):
    with pytest.raises(SillError) as exc:
        parse_percentage(value)
    assert exc.value.field == "percentage"


def test_a_percentage_that_rounds_to_nothing_is_refused(site, make_order, refund):
    order = make_order(total="1", currency="JPY")
    with pytest.raises(SillError, match="rounds to ¥0"):
        refund(order, kind="percentage", percentage=Decimal("10"))
    _nothing_written(site)


# --- adding up --------------------------------------------------------------------------------


def test_partial_refunds_that_add_up_to_the_total_make_the_order_refunded(make_order, refund):
    order = make_order(total="89.00")
    refund(order, kind="amount", amount=parse_major("30.00", "USD"))
    assert _state(order)[0] == "PARTIALLY_REFUNDED"
    refund(order, kind="percentage", percentage=Decimal("25"))  # 22.25
    assert _state(order) == ("PARTIALLY_REFUNDED", 5225, 0)
    refund(order, kind="amount", amount=parse_major("36.75", "USD"))
    assert _state(order) == ("REFUNDED", 8900, 0)
    assert sum(r.amount_minor for r in Refund.objects.filter(order=order)) == 8900
    with pytest.raises(SillError) as exc:
        refund(order, kind="amount", amount=parse_major("0.01", "USD"))
    assert (
        exc.value.code == "order_not_refundable" and "already refunded in full" in exc.value.message
    )


def test_yen_and_fils_refunds_add_up_exactly(make_order, refund):
    yen = make_order(total="4801", currency="JPY")
    refund(yen, kind="percentage", percentage=Decimal("50"))  # 2400.5 → 2401
    refund(yen, kind="full")  # the 2400 left
    assert _state(yen) == ("REFUNDED", 4801, 0)
    kwd = make_order(total="1.001", currency="KWD")
    refund(kwd, kind="percentage", percentage=Decimal("50"))  # 0.5005 → 0.501
    refund(kwd, kind="percentage", percentage=Decimal("50"))  # 0.501, capped at 0.500
    assert _state(kwd) == ("REFUNDED", 1001, 0)


# --- status rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["PAID", "SHIPPED", "DELIVERED", "PARTIALLY_REFUNDED"])
def test_refundable_statuses_are_refunded(make_order, refund, status):
    order = make_order(status=status)
    assert refund(order, kind="amount", amount=parse_major("1.00", "USD")).status == "succeeded"
    assert _state(order)[0] == "PARTIALLY_REFUNDED"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("PENDING", "is still pending: it hasn't been paid"),
        ("REFUNDED", "is already refunded in full"),
        ("CANCELLED", "was cancelled; cancelled orders can't be refunded"),
    ],
)
def test_pending_refunded_and_cancelled_orders_are_refused(
    site, make_order, refund, status, message
):
    order = make_order(status=status)
    with pytest.raises(SillError) as exc:
        refund(order, kind="full")
    assert exc.value.code == "order_not_refundable" and exc.value.status == 409
    assert message in exc.value.message and order.number in exc.value.message
    _nothing_written(site)


def test_an_order_that_was_never_charged_is_refused(site, make_order, refund):
    with pytest.raises(SillError, match="no successful charge"):
        refund(make_order(charged=False), kind="full")
    _nothing_written(site)


def test_another_sites_order_is_not_found(site, other_site, make_order, refund):
    with pytest.raises(SillError) as exc:
        refund(make_order(on_site=other_site), kind="full")
    assert exc.value.status == 404


def test_a_disabled_rail_is_refused_before_anything_is_written(site, make_order, refund):
    order = make_order()
    RailAccount.objects.filter(site=site).update(enabled=False)
    with pytest.raises(SillError) as exc:
        refund(order, kind="full")
    assert exc.value.code == "rail_disabled"
    _nothing_written(site)


# --- reason rules -----------------------------------------------------------------------------


def test_a_parent_reason_is_refused(site, make_order, refund, reasons):
    with pytest.raises(SillError) as exc:
        refund(make_order(), reason=reasons["product"])
    assert exc.value.code == "reason_not_leaf" and exc.value.status == 400
    _nothing_written(site)


def test_an_inactive_reason_or_one_under_an_inactive_category_is_refused(
    site, make_order, refund, reasons
):
    order = make_order()
    set_reason_active(reason=reasons["broken"], actor=site_owner(site), active=False)
    with pytest.raises(SillError) as exc:
        refund(order, reason=reasons["broken"])
    assert exc.value.code == "reason_inactive"
    set_reason_active(reason=reasons["defective"], actor=site_owner(site), active=False)
    with pytest.raises(SillError) as exc:
        refund(order, reason=reasons["worn"])
    assert exc.value.code == "reason_inactive"
    _nothing_written(site)


def test_another_sites_reason_is_refused(site, other_site, make_order, refund):
    theirs = add_reason(site=other_site, actor=site_owner(other_site), name="Theirs")
    with pytest.raises(SillError) as exc:
        refund(make_order(), reason=theirs)
    assert exc.value.code == "invalid_field"
    _nothing_written(site)


def test_the_policies_read_the_reason_code_inherited_from_a_coded_category(
    site, make_order, refund, reasons
):
    made = refund(make_order(), reason=reasons["worn"])
    assert made.reason_code == "defective"
    assert made.reason_path == f"Defective{PATH_SEPARATOR}Worn out early"
    decision = json.loads(AuditRecord.objects.get(site=site, kind="approved").payload)["body"]
    assert decision["facts"]["refundReason"] == "defective"
    assert decision["reason_code"] == "defective"


# --- double submit ----------------------------------------------------------------------------


def test_a_resubmitted_form_makes_one_refund(make_order, refund):
    order = make_order(total="89.00")
    seen = OrderSnapshot(remaining_minor=8900, refund_count=0)
    refund(order, kind="percentage", percentage=Decimal("25"), expected=seen)
    with pytest.raises(SillError) as exc:
        refund(order, kind="percentage", percentage=Decimal("25"), expected=seen)
    assert exc.value.code == "order_changed" and exc.value.status == 409
    assert "Nothing was refunded by this request" in exc.value.message
    assert Refund.objects.filter(order=order).count() == 1
    assert _state(order) == ("PARTIALLY_REFUNDED", 2225, 0)


def test_a_resubmission_is_refused_even_when_the_first_refund_moved_no_money(
    site, make_order, refund, mock_rail
):
    # A refund the rail declined releases its reservation: the remaining amount is the same
    # again, but the number of refunds on the order says the form is stale.
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    order = make_order(total="89.00")
    seen = OrderSnapshot(remaining_minor=8900, refund_count=0)
    assert refund(order, kind="full", expected=seen).status == "failed"
    assert Charge.objects.get(order=order).remaining == Money(8900, "USD")
    with pytest.raises(SillError) as exc:
        refund(order, kind="full", expected=seen)
    assert exc.value.code == "order_changed"
    assert Refund.objects.filter(order=order).count() == 1
