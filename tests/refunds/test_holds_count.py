"""Held refunds count against what is left to refund (issue 15, item 3).

The reported defect: a $99 order with $198 already held still offered "Full refund $99.00",
and the approver later met "only $0.00 refundable". A new refund's quote now subtracts the
charge's held refunds; approving a hold still checks what remains without the holds.
"""

from __future__ import annotations

import pytest

from refunds.models import Refund, RefundStatus
from refunds.quote import RefundRefused, charged_charge, quote_refund
from refunds.review.decisions import approve_refund
from sill.money import Money
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def order99(make_order, mock_rail):
    return make_order(total="99.00")


def test_it_subtracts_holds_from_a_new_refunds_quote(order99, members):
    hold_refund(order=order99, requested_by=members["staff"].user, amount_minor=4000)
    quote = quote_refund(order=order99, charge=charged_charge(order99))
    assert quote.remaining == Money(5900, "USD")
    assert quote.held == Money(4000, "USD")


def test_it_refuses_a_new_refund_when_holds_use_up_the_rest_in_words(order99, members):
    hold_refund(order=order99, requested_by=members["staff"].user)
    with pytest.raises(RefundRefused) as refused:
        quote_refund(order=order99, charge=charged_charge(order99))
    assert refused.value.code == "exceeds_refundable"
    assert "$99.00 is awaiting approval" in refused.value.message


def test_the_reproduced_defect_a_held_99_order_offers_no_full_refund(
    client_for, order99, members, leaf
):
    held = hold_refund(order=order99, requested_by=members["admin"].user)
    body = client_for("staff").get(f"/orders/{order99.id}/").content.decode()
    assert "Full refund" not in body  # it offered "Full refund · $99.00" before
    assert "$99.00 is awaiting approval" in body
    assert "A $99.00 refund is awaiting approval" in body
    # Staff cannot open /held/: the link is the refund page, which they may open.
    assert f'href="/refunds/{held.id}/"' in body


def test_holds_beyond_the_charge_say_how_much_awaits_approval(client_for, order99, members, leaf):
    # As the issue found it: $198 held on a $99 order (made before holds counted).
    held = hold_refund(order=order99, requested_by=members["admin"].user)
    Refund.objects.filter(pk=held.pk).update(amount_minor=19800)
    body = client_for("staff").get(f"/orders/{order99.id}/").content.decode()
    assert "Full refund" not in body
    assert "$198.00 is awaiting approval" in body


def test_the_form_offers_what_remains_after_holds_and_links_each_hold(
    client_for, order99, members, leaf
):
    first = hold_refund(order=order99, requested_by=members["admin"].user, amount_minor=2000)
    second = hold_refund(order=order99, requested_by=members["admin"].user, amount_minor=3000)
    body = client_for("staff").get(f"/orders/{order99.id}/").content.decode()
    assert 'Full refund <span class="muted">· $49.00</span>' in body
    assert "A $20.00 refund is awaiting approval" in body
    assert "A $30.00 refund is awaiting approval" in body
    assert f'href="/refunds/{first.id}/"' in body and f'href="/refunds/{second.id}/"' in body
    assert 'name="expected_remaining_minor" value="4900"' in body


def test_asking_more_than_remains_after_holds_writes_nothing(
    client_for, order99, members, leaf, django_capture_on_commit_callbacks
):
    hold_refund(order=order99, requested_by=members["admin"].user, amount_minor=6000)
    before = Refund.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for("staff").post(
            f"/orders/{order99.id}/refund/",
            {"kind": "amount", "amount": "50.00", "reason": str(leaf.pk), "confirmed": "1"},
        )
    assert response.status_code == 422
    body = response.content.decode()
    assert "At most $39.00 can be refunded" in body
    assert "$60.00 is awaiting approval" in body
    assert Refund.objects.count() == before


def test_approving_a_hold_is_not_blocked_by_the_other_holds(order99, members):
    first = hold_refund(order=order99, requested_by=members["staff"].user, amount_minor=6000)
    second = hold_refund(order=order99, requested_by=members["staff"].user, amount_minor=3900)
    # As two holds made before holds counted could be: together more than the charge.
    Refund.objects.filter(pk=second.pk).update(amount_minor=9900)
    approved = approve_refund(refund=first, actor=members["owner"].user)
    assert approved.status == RefundStatus.PROCESSING


def test_the_agent_path_is_capped_at_what_remains_after_holds(
    original, agent, members, django_capture_on_commit_callbacks
):
    # A staff hold of $50 on the $89 order: the agent's full refund asks for at most $39.
    hold_refund(order=original, requested_by=members["staff"].user, amount_minor=5000)
    agent_refund = hold_refund(order=original, agent=agent, amount_minor=8900)
    assert agent_refund.amount == Money(3900, "USD")


def test_the_staff_api_answers_what_remains_after_holds(
    client_for, order99, members, leaf, django_capture_on_commit_callbacks
):
    import json

    hold_refund(order=order99, requested_by=members["admin"].user, amount_minor=6000)
    client = client_for("staff")
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(
            f"/api/order/{order99.id}/refund",
            json.dumps({"amount": "10.00", "reasonId": leaf.pk, "expectedRemaining": "39.00"}),
            content_type="application/json",
        )
    assert first.status_code == 201, first.content
    assert first.json()["remaining"] == "29.00"  # $99 - $10 refunded - $60 awaiting approval
    too_much = client.post(
        f"/api/order/{order99.id}/refund",
        json.dumps({"amount": "30.00", "reasonId": leaf.pk}),
        content_type="application/json",
    )
    assert too_much.status_code == 400
    assert too_much.json()["error"]["code"] == "exceeds_refundable"
