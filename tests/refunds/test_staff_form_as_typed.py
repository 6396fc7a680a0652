"""The order page's refund form as a merchant types into it, through confirmation to refund.

Each case goes the way a browser does: open the order page, submit its form (the confirmation
comes back), then press the confirmation's Refund button with exactly the fields it carries.
Whatever is typed is understood exactly (the confirmed amount is the amount refunded) or
refused beside its field with words saying what to type instead; never a 500.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from refunds.models import Refund
from refunds.staff.services import create_staff_refund
from sill.money import Money
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db


def _hidden(body: str) -> dict[str, str]:
    fields = {
        html.unescape(m.group(1)): html.unescape(m.group(2))
        for m in re.finditer(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', body)
    }
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def _page_form(client: Any, order: Any) -> dict[str, str]:
    """The hidden fields of the order page's refund form, as the browser would post them."""
    page = client.get(f"/orders/{order.id}/").content.decode()
    return _hidden(page.split('id="refund-panel"', 1)[1].split("</form>", 1)[0])


def _confirmation(body: str) -> dict[str, str]:
    return _hidden(body.split('class="refund-card refund-confirm"', 1)[1].split("</form>", 1)[0])


def _shown_amount(body: str) -> str:
    match = re.search(r'<strong class="refund-amount">([^<]*)</strong>', body)
    assert match, body
    return html.unescape(match.group(1))


def _field_error(body: str, field: str) -> str:
    """The message shown beside ``field``'s input (``refund-<field>-error``), or ''."""
    match = re.search(
        rf'<small class="field-error" id="refund-{field}-error"[^>]*>([^<]*)</small>', body
    )
    return html.unescape(match.group(1)) if match else ""


@pytest.fixture
def submit(client_for, leaf):
    client = client_for("staff")

    def first(order: Any, **data: str) -> Any:
        form = {**_page_form(client, order), "reason": str(leaf.pk), **data}
        return client.post(f"/orders/{order.id}/refund/", form)

    return first


@pytest.fixture
def confirm(client_for, django_capture_on_commit_callbacks):
    client = client_for("staff")

    def press_refund(order: Any, confirmation_body: str) -> Any:
        fields = {**_confirmation(confirmation_body), "confirmed": "1"}
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(f"/orders/{order.id}/refund/", fields)

    return press_refund


def _nothing_moved() -> None:
    assert not Refund.objects.exists()
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()


# --- amounts that are understood exactly ---------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "total", "typed", "shown", "minor"),
    [
        ("USD", "89.00", "10", "$10.00", 1000),
        ("USD", "89.00", "10.5", "$10.50", 1050),
        ("USD", "89.00", "10.50", "$10.50", 1050),
        ("USD", "89.00", " 10.50 ", "$10.50", 1050),
        ("USD", "89.00", ".50", "$0.50", 50),  # refused as "not a decimal amount" before
        ("USD", "89.00", "10.", "$10.00", 1000),
        ("JPY", "5000", "100", "¥100", 100),
        ("JPY", "5000", "100.", "¥100", 100),
        ("KWD", "10.000", "1.234", "KWD 1.234", 1234),
    ],
)
def test_it_refunds_exactly_the_amount_typed_and_confirmed(
    make_order, mock_rail, submit, confirm, currency, total, typed, shown, minor
):
    order = make_order(total=total, currency=currency)

    asked = submit(order, kind="amount", amount=typed)
    assert asked.status_code == 200
    assert _shown_amount(asked.content.decode()) == shown
    done = confirm(order, asked.content.decode())

    assert done.status_code == 303
    assert Refund.objects.get().amount_minor == minor


# --- amounts that are refused ------------------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "total", "typed", "words"),
    [
        ("USD", "2000.00", "1,000.00", "without thousands separators"),
        ("USD", "2000.00", "1.000,00", "with a dot for the decimals"),
        ("USD", "89.00", " $10 ", "without a currency symbol (e.g. 1000.50)"),
        ("USD", "89.00", "1e3", "is not a decimal amount"),
        ("USD", "89.00", "\u0661\u0660", "is not a decimal amount"),
        ("USD", "89.00", "10.505", "USD amounts have at most 2 decimal place(s)"),
        ("USD", "89.00", "0", "The amount must be more than zero."),
        ("USD", "89.00", "-5", "The amount must be more than zero."),
        ("JPY", "5000", "100.5", "JPY amounts are whole numbers, without decimals"),
        ("JPY", "5000", "1,000", "(e.g. 1000)"),
        ("KWD", "10.000", "1.2345", "KWD amounts have at most 3 decimal place(s)"),
        ("KWD", "10.000", "KWD 1", "(e.g. 1000.500)"),
        # Said as "not a decimal amount ... without thousands separators" before:
        ("USD", "89.00", "12345678901234567890", "too large: USD amounts are at most $9,999,"),
        ("JPY", "5000", "1" * 19, "JPY amounts are at most ¥999,999,999,999,999,999"),
        ("USD", "89.00", "10.0000001", "USD amounts have at most 2 decimal place(s)"),
        # Quoted as Python reprs before: "'1\xa0000' is not a decimal amount".
        ("EUR", "2000.00", "1\u00a0000", "Text with a no-break space (U+00A0) is not a decimal"),
        ("EUR", "2000.00", "1\u202f000", "Text with a narrow no-break space (U+202F) is not"),
        ("USD", "89.00", "\u200b10", "Text with a zero width space (U+200B) is not a decimal"),
        ("USD", "89.00", "\uff11\uff10", "Text with a fullwidth digit one (U+FF11) is not a"),
        ("USD", "89.00", "€10", "Text with a euro sign (U+20AC) is not a decimal amount"),
        ("USD", "89.00", "1,5", "'1,5' is not a decimal amount: type it in digits with a dot"),
    ],
)
def test_it_refuses_what_it_cannot_read_exactly_saying_how_to_type_it(
    make_order, mock_rail, submit, currency, total, typed, words
):
    """Never guessed: "1,000.00" is a thousand in one country and one in another."""
    order = make_order(total=total, currency=currency)

    response = submit(order, kind="amount", amount=typed)

    assert response.status_code == 422
    body = html.unescape(response.content.decode())
    assert words in body
    assert "\\x" not in body and "\\u" not in body
    _nothing_moved()


@pytest.mark.parametrize(
    ("currency", "total", "data", "field", "words"),
    [
        ("USD", "89.00", {"amount": "1,000.00"}, "amount", "without thousands separators"),
        ("USD", "89.00", {"amount": "100"}, "amount", "At most $89.00 can be refunded"),
        ("USD", "89.00", {"amount": "0"}, "amount", "The amount must be more than zero."),
        ("USD", "89.00", {"percentage": "0"}, "percentage", "more than 0 and at most 100"),
        ("USD", "89.00", {"percentage": "150"}, "percentage", "more than 0 and at most 100"),
        ("USD", "89.00", {"percentage": "1000"}, "percentage", "more than 0 and at most 100"),
        (
            "USD",
            "89.00",
            {"percentage": "\uff15"},
            "percentage",
            "Text with a fullwidth digit five",
        ),
        ("USD", "89.00", {"percentage": "1,5 %"}, "percentage", "'1,5' is not a percentage"),
        ("USD", "89.00", {"percentage": "5.00000000001"}, "percentage", "at most 2 decimals"),
        ("USD", "89.00", {"percentage": "33.333"}, "percentage", "at most 2 decimals"),
        ("USD", "89.00", {"percentage": "12,5"}, "percentage", "with a dot before any decimals"),
        ("JPY", "5", {"percentage": "1"}, "percentage", "1% of ¥5 rounds to ¥0; nothing to"),
        # As typed, with a space before the sign: "0.010 % of ¥1,000 rounds to ¥0".
        ("JPY", "1000", {"percentage": "0.010"}, "percentage", "0.01% of ¥1,000 rounds to ¥0"),
    ],
)
def test_a_refused_amount_or_percentage_is_named_beside_its_field(
    make_order, mock_rail, submit, currency, total, data, field, words
):
    order = make_order(total=total, currency=currency)

    response = submit(order, kind=field, **data)

    assert response.status_code == 422
    body = response.content.decode()
    assert words in _field_error(body, field)
    assert f'aria-invalid="true" aria-describedby="refund-{field}-error"' in body
    assert 'class="flash flash-error"' not in body  # said once, where the user looks
    _nothing_moved()


def test_a_long_amount_is_refused_not_cut_to_something_else(make_order, mock_rail, submit):
    """The form cut every field to 200 characters before reading it: "10", 198 spaces and
    "5" became "10", and $10.00 was offered for a value that was not 10."""
    order = make_order(total="89.00")

    response = submit(order, kind="amount", amount="10" + " " * 198 + "5")

    assert response.status_code == 422
    assert "That amount is too long" in html.unescape(response.content.decode())
    _nothing_moved()


def test_a_long_percentage_is_refused_not_cut_to_something_else(make_order, mock_rail, submit):
    order = make_order(total="89.00")

    response = submit(order, kind="percentage", percentage="10" + " " * 198 + "0")

    assert response.status_code == 422
    assert "That percentage is too long" in html.unescape(response.content.decode())
    _nothing_moved()


def test_a_long_amount_is_not_echoed_back_in_the_message(make_order, mock_rail, submit):
    order = make_order(total="89.00")

    response = submit(order, kind="amount", amount="1" * 5000)

    assert response.status_code == 422
    body = html.unescape(response.content.decode())
    assert "That amount is too long: type the USD amount in digits" in body
    assert "1" * 40 not in body.split('name="amount"', 1)[0]  # only the input keeps it
    _nothing_moved()


def test_the_staff_api_refuses_a_long_amount_in_words(client_for, make_order, mock_rail, leaf):
    order = make_order(total="89.00")

    response = client_for("staff").post(
        f"/api/order/{order.id}/refund",
        {"amount": "1" * 300, "reasonId": leaf.pk},
        content_type="application/json",
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "amount" and error["message"].startswith("That amount is too long")
    _nothing_moved()


# --- percentages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "total", "typed", "shown", "minor"),
    [
        ("USD", "89.00", "100", "$89.00", 8900),
        ("USD", "89.00", ".5", "$0.45", 45),  # 0.445 → 0.45; ".5" was "not a percentage"
        ("USD", "89.00", "50.", "$44.50", 4450),
        ("USD", "89.00", "33.33", "$29.66", 2966),  # 29.6637 → 29.66
        ("USD", "10.01", "50", "$5.01", 501),  # 5.005 → 5.01, half up
        ("JPY", "1001", "50", "¥501", 501),
        ("KWD", "1.001", "50", "KWD 0.501", 501),
    ],
)
def test_a_percentage_refunds_what_its_confirmation_showed(
    make_order, mock_rail, submit, confirm, currency, total, typed, shown, minor
):
    order = make_order(total=total, currency=currency)

    asked = submit(order, kind="percentage", percentage=typed)
    assert asked.status_code == 200
    assert _shown_amount(asked.content.decode()) == shown
    done = confirm(order, asked.content.decode())

    assert done.status_code == 303
    assert Refund.objects.get().amount_minor == minor


def test_a_percentage_of_a_partly_refunded_order_is_of_the_total_capped_at_what_is_left(
    site, members, make_order, mock_rail, leaf, submit, confirm, django_capture_on_commit_callbacks
):
    order = make_order(total="89.00")
    with django_capture_on_commit_callbacks(execute=True):
        create_staff_refund(
            site=site,
            order=order,
            actor=members["owner"].user,
            kind="amount",
            amount=Money(8000, "USD"),
            reason=leaf,
        )

    asked = submit(order, kind="percentage", percentage="50")
    body = asked.content.decode()
    assert _shown_amount(body) == "$9.00"
    assert "$44.50" in body and "capped at the $9.00 left to refund" in body
    assert confirm(order, body).status_code == 303

    assert sorted(r.amount_minor for r in Refund.objects.all()) == [900, 8000]


# --- the order changes under the form ------------------------------------------------------


def _another_refund_lands(site: Any, members: Any, order: Any, leaf: Any, capture: Any) -> None:
    with capture(execute=True):
        create_staff_refund(
            site=site,
            order=order,
            actor=members["owner"].user,
            kind="amount",
            amount=Money(100, "USD"),
            reason=leaf,
        )


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "full"},
        {"kind": "amount", "amount": "5"},
        {"kind": "percentage", "percentage": "10"},
    ],
)
def test_a_refund_landing_after_the_confirmation_refuses_the_submit(
    site, members, make_order, mock_rail, leaf, submit, confirm, data,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    order = make_order(total="89.00")
    asked = submit(order, **data)
    assert asked.status_code == 200

    _another_refund_lands(site, members, order, leaf, django_capture_on_commit_callbacks)
    done = confirm(order, asked.content.decode())

    assert done.status_code == 422
    assert "changed since you" in html.unescape(done.content.decode())
    assert [r.amount_minor for r in Refund.objects.all()] == [100]


def test_a_form_opened_before_another_refund_is_refused_at_the_confirmation(
    client_for, site, members, make_order, mock_rail, leaf, django_capture_on_commit_callbacks
):
    """The confirmation must not offer "Refund $88.00" for a form the refund will refuse as
    stale: the user opened the page when $89.00 was left, and the click would be refused."""
    order = make_order(total="89.00")
    client = client_for("staff")
    form = _page_form(client, order)

    _another_refund_lands(site, members, order, leaf, django_capture_on_commit_callbacks)
    response = client.post(
        f"/orders/{order.id}/refund/", {**form, "kind": "full", "reason": str(leaf.pk)}
    )

    body = html.unescape(response.content.decode())
    assert response.status_code == 422
    assert "refund-confirm" not in body
    assert "changed since you opened it" in body and "$88.00" in body
    assert [r.amount_minor for r in Refund.objects.all()] == [100]


def test_a_refund_leaving_less_than_a_confirmed_percentage_says_the_order_changed(
    site, members, make_order, mock_rail, leaf, submit, confirm, django_capture_on_commit_callbacks
):
    """50% of $89.00 confirmed as $44.50, then someone else refunds $50.00: the submit must
    say the order changed, not that "50% comes to $39.00"."""
    order = make_order(total="89.00")
    asked = submit(order, kind="percentage", percentage="50", note="as typed")
    assert _shown_amount(asked.content.decode()) == "$44.50"

    with django_capture_on_commit_callbacks(execute=True):
        create_staff_refund(
            site=site,
            order=order,
            actor=members["owner"].user,
            kind="amount",
            amount=Money(5000, "USD"),
            reason=leaf,
        )
    done = confirm(order, asked.content.decode())

    body = html.unescape(done.content.decode())
    assert done.status_code == 422
    assert "changed since you" in body and "$39.00" in body
    assert "comes to" not in body
    assert 'name="percentage" value="50"' in body and ">as typed</textarea>" in body
    assert [r.amount_minor for r in Refund.objects.all()] == [5000]
