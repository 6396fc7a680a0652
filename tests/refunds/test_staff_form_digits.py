"""The order page's refund form takes plain ASCII numbers only, like the staff API.

Issue 9, defect 4 on the form path: ``parse_major`` (``\\d`` and ``Decimal()``) and
``parse_percentage`` (``Decimal()``) read Arabic-Indic and fullwidth digits as numbers.
"""

from __future__ import annotations

import pytest

from refunds.models import Refund
from sill.rails.models import MockLedgerEntry

pytestmark = pytest.mark.django_db

# str.translate tables: ASCII 0-9 to U+0660-U+0669 and to U+FF10-U+FF19.
ARABIC_INDIC = {ord("0") + i: 0x0660 + i for i in range(10)}
FULLWIDTH = {ord("0") + i: 0xFF10 + i for i in range(10)}


@pytest.fixture
def post_refund(client_for, order, django_capture_on_commit_callbacks):
    client = client_for("staff")

    def post(data: dict[str, str]):
        form = {
            "expected_remaining_minor": "",
            "expected_refund_count": "",
            "note": "",
            "confirmed": "1",
            **data,
        }
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(f"/orders/{order.id}/refund/", form)

    return post


@pytest.mark.parametrize("digits", [ARABIC_INDIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "amount", "amount": "10"}, "is not a decimal amount"),
        ({"kind": "amount", "amount": "10.00"}, "is not a decimal amount"),
        ({"kind": "percentage", "percentage": "25"}, "is not a percentage"),
    ],
)
def test_it_refuses_non_ascii_digits(post_refund, leaf, digits, data, message):
    data = {k: v.translate(digits) if k != "kind" else v for k, v in data.items()}

    response = post_refund({**data, "reason": str(leaf.pk)})

    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Refund.objects.exists()
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()


@pytest.mark.parametrize("digits", [ARABIC_INDIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
def test_it_refuses_a_reason_in_non_ascii_digits(post_refund, leaf, digits):
    response = post_refund({"kind": "full", "reason": str(leaf.pk).translate(digits)})

    assert response.status_code == 422
    assert "Choose a reason for this refund." in response.content.decode()
    assert not Refund.objects.exists()


def test_ascii_digits_still_refund(post_refund, leaf):
    response = post_refund({"kind": "amount", "amount": "10.00", "reason": str(leaf.pk)})

    assert response.status_code == 303
    assert Refund.objects.get().amount_minor == 1000


@pytest.mark.parametrize("value", ["²", "\u0661\u0660", "9" * 40])
def test_a_snapshot_field_that_is_not_an_ascii_number_is_ignored_not_a_500(
    post_refund, leaf, value
):
    response = post_refund(
        {"kind": "full", "reason": str(leaf.pk), "expected_remaining_minor": value,
         "expected_refund_count": value}
    )  # fmt: skip
    assert response.status_code < 500


@pytest.mark.parametrize("value", ["²", "\u0661\u0662", "9" * 40])
def test_a_reason_parent_that_is_not_an_ascii_number_is_refused_not_a_500(client_for, value):
    response = client_for("owner").post(
        "/settings/reasons/add/", {"name": "Odd parent", "parent": value}
    )
    assert response.status_code in (200, 400, 422)
    assert not Refund.objects.exists()
