"""Every refund id on the order's Transactions, the held list and the held page links to the
refund page; a staff member's link to a hold is the refund page, which they may open."""

from __future__ import annotations

import pytest

from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


def test_transactions_and_held_pages_link_the_refund_page(client_for, original, agent, members):
    held = hold_refund(order=original, agent=agent)
    page = f"/refunds/{held.id}/"
    owner = client_for("owner")
    assert page in owner.get(f"/orders/{original.id}/?tab=transactions").content.decode()
    assert page in owner.get("/held/").content.decode()
    assert page in owner.get(f"/held/{held.id}/").content.decode()
    assert owner.get(page).status_code == 200


def test_a_staff_member_is_sent_to_the_refund_page_not_the_held_page(client_for, order, members):
    held = hold_refund(order=order, requested_by=members["owner"].user)
    staff = client_for("staff")
    body = staff.get(f"/orders/{order.id}/").content.decode()
    assert f'href="/refunds/{held.id}/"' in body and f'href="/held/{held.id}/"' not in body
    assert staff.get(f"/refunds/{held.id}/").status_code == 200
