"""The order-page refund form carries a fresh idempotency key: a double click or a browser
retry makes one refund, and the repeated submit answers the first one's result page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from refunds.models import IdempotencyRecord, Refund
from sill.accounts.services import add_member
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _hidden(body: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', body)
    assert match, name
    return match.group(1)


@pytest.fixture
def rendered_form(client_for, order):
    """The hidden fields of the refund form as ``persona`` sees it on the order page."""

    def fields(persona: str = "staff") -> dict[str, str]:
        page = client_for(persona).get(f"/orders/{order.id}/").content.decode()
        names = ("idempotency_key", "expected_remaining_minor", "expected_refund_count")
        return {name: _hidden(page, name) for name in names}

    return fields


@pytest.fixture
def submit(django_capture_on_commit_callbacks, order, members):
    """``submit(data)`` posts the form from a fresh browser session of the staff member."""

    def post(data: dict[str, str], *, client: Client | None = None, **headers):
        if client is None:
            client = Client()
            client.force_login(members["staff"].user)
        with django_capture_on_commit_callbacks(execute=True):
            form = {"confirmed": "1", **data}  # as the confirmation posts it
            return client.post(f"/orders/{order.id}/refund/", form, headers=headers), client

    return post


def _messages(client: Client, order) -> str:
    page = client.get(f"/orders/{order.id}/?tab=transactions").content.decode()
    return " ".join(re.findall(r'<div class="flash[^"]*" role="status">([^<]*)</div>', page))


def test_it_renders_a_fresh_key_with_every_form(rendered_form):
    first, second = rendered_form()["idempotency_key"], rendered_form()["idempotency_key"]
    assert first != second
    assert all(re.fullmatch(r"[\x21-\x7e]{16,255}", key) for key in (first, second))


def test_a_double_submit_makes_one_refund_and_shows_it_twice(rendered_form, submit, order, leaf):
    data = {**rendered_form(), "kind": "amount", "amount": "12.50", "reason": str(leaf.pk)}

    first, first_client = submit(data)
    # The browser dropped the first answer and sent the form again: a session without the
    # first response's cookies.
    second, second_client = submit(data)

    assert first.status_code == second.status_code == 303
    assert second["Location"] == first["Location"] == f"/orders/{order.id}/?tab=transactions"
    refund = Refund.objects.get()
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert Charge.objects.get(order=order).amount_refunded_minor == 1250
    # The first answer was given before the (eager) execution ran; the repeat sees it settled.
    assert "Refund of $12.50 sent to Mock" in _messages(first_client, order)
    assert "Refunded $12.50 on Mock" in _messages(second_client, order)
    page = second_client.get(f"/orders/{order.id}/?tab=transactions").content.decode()
    assert f'data-refund-id="{refund.id}"' in page


def test_back_and_submit_again_says_nothing_more_was_refunded(rendered_form, submit, order, leaf):
    data = {**rendered_form(), "kind": "amount", "amount": "12.50", "reason": str(leaf.pk)}
    _, client = submit(data)
    assert "Refund of $12.50 sent to Mock" in _messages(client, order)

    # Back to the confirmation, and Refund pressed again in the same browser.
    again, _ = submit(data, client=client)

    assert again.status_code == 303
    shown = _messages(client, order)
    assert "This refund form was already submitted: nothing more was refunded." in shown
    assert "Refunded $12.50 on Mock" in shown
    assert Charge.objects.get(order=order).amount_refunded_minor == 1250
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_double_submit_through_htmx_redirects_both_to_the_result(
    rendered_form, submit, order, leaf
):
    data = {**rendered_form(), "kind": "full", "reason": str(leaf.pk)}

    answers = [submit(data, HX_Request="true")[0] for _ in range(2)]

    assert [a.status_code for a in answers] == [200, 200]
    assert {a["HX-Redirect"] for a in answers} == {f"/orders/{order.id}/?tab=transactions"}
    assert Refund.objects.count() == 1


def test_a_repeated_refusal_shows_the_same_refusal(rendered_form, submit, order, leaf):
    data = {**rendered_form(), "kind": "amount", "amount": "90.00", "reason": str(leaf.pk)}

    first, _ = submit(data)
    second, _ = submit(data)

    assert first.status_code == second.status_code == 422
    for answer in (first, second):
        assert "At most $89.00 can be refunded on this order" in answer.content.decode()
    assert Refund.objects.count() == 0
    assert IdempotencyRecord.objects.get().response_status == 400
    # The re-rendered form has a new key, so a corrected submit is a new request.
    assert _hidden(second.content.decode(), "idempotency_key") != data["idempotency_key"]


def test_the_same_form_with_other_values_makes_nothing(rendered_form, submit, order, leaf):
    data = {**rendered_form(), "kind": "amount", "amount": "10.00", "reason": str(leaf.pk)}
    submit(data)

    # The back button brought the submitted form back; the user changed the amount.
    changed, _ = submit({**data, "amount": "20.00"})

    assert changed.status_code == 422
    assert "already submitted with other values" in changed.content.decode()
    assert Charge.objects.get(order=order).amount_refunded_minor == 1000


def test_a_submit_while_the_first_is_still_running_says_so(
    rendered_form, submit, order, leaf, settings
):
    settings.SILL_FORM_IDEMPOTENCY_WAIT_SECONDS = 0.3
    data = {**rendered_form(), "kind": "full", "reason": str(leaf.pk)}
    submit(data)
    # As if the first submit were still working under its key.
    IdempotencyRecord.objects.update(state="in_flight", response_status=None, response_body="")

    second, client = submit(data)

    assert second.status_code == 303
    assert "still being processed" in _messages(client, order)
    assert Refund.objects.count() == 1


def test_a_percentage_awaiting_confirmation_keeps_the_key_free(rendered_form, submit, order, leaf):
    data = {**rendered_form(), "kind": "percentage", "percentage": "50", "reason": str(leaf.pk)}

    shown, _ = submit(data)
    assert shown.status_code == 422 and "50% comes to $44.50" in shown.content.decode()
    assert IdempotencyRecord.objects.count() == 0

    confirmed, _ = submit({**data, "confirmed_amount_minor": "4450"})
    assert confirmed.status_code == 303
    assert Charge.objects.get(order=order).amount_refunded_minor == 4450


def test_a_malformed_key_is_refused(rendered_form, submit, leaf):
    data = {**rendered_form(), "idempotency_key": "k" * 256, "kind": "full", "reason": str(leaf.pk)}
    answer, _ = submit(data)
    assert answer.status_code == 422
    assert Refund.objects.count() == 0 and IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize(("persona", "status"), [("clerk", 403), ("outsider", 404)])
def test_access_is_checked_before_a_key_is_claimed(
    site, members, order, leaf, django_capture_on_commit_callbacks, persona, status
):
    client = Client()
    if persona == "clerk":
        clerk = add_member(
            site=site, email="clerk@roasters.example", role="staff", password=PASSWORD
        )
        client.force_login(clerk.user)
    else:
        client.force_login(members[persona].user)
    data = {"idempotency_key": "k-1", "kind": "full", "reason": str(leaf.pk), "confirmed": "1"}
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/orders/{order.id}/refund/", data)
    assert answer.status_code == status
    assert IdempotencyRecord.objects.count() == 0 and Refund.objects.count() == 0
