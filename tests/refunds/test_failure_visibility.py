"""Failed and flagged refunds are visible: badges and a filter on the order list, a banner
with the reason in words and the next step on the order page, and one email to owners and
admins per failed refund. Each failure is real: the mock rail is scripted to decline."""

from __future__ import annotations

import pytest
from django.core import mail
from django.core.cache import cache

from refunds.execution import RetryLater, execute_refund
from refunds.models import RefundStatus
from refunds.review.failures import notify_failed
from refunds.services import fail_refund
from tests.refunds.conftest import hold_refund, outside_refund

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()


def _script(rail, **config):
    rail.config = config
    rail.save()


def _declined(order, staff_refund, mock_rail, capture):
    """A staff refund of ``order`` the rail declined, run as the worker runs it."""
    _script(mock_rail, refund="decline")
    refund = staff_refund(order)
    with capture(execute=True):
        assert execute_refund(refund.id) == "failed"
    refund.refresh_from_db()
    return refund


def test_it_emails_owners_and_admins_once_when_the_rail_declines(
    order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    mail.outbox.clear()
    refund = _declined(order, staff_refund, mock_rail, django_capture_on_commit_callbacks)
    assert refund.status == RefundStatus.FAILED
    # One message each (tests/refunds/test_failure_mail_refused.py), in the same words.
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    for message in mail.outbox:
        assert message.subject.startswith("[Sill] Refund failed:")
        assert "Declined by the rail" in message.body  # the outcome code in words
        assert f"/orders/{order.id}/" in message.body
        assert "rail_declined" not in message.body
    # A second delivery of the task, or a second failure call, sends nothing more.
    assert notify_failed(refund_id=refund.id) is False
    with django_capture_on_commit_callbacks(execute=True):
        assert fail_refund(refund_id=refund.id, code="x", message="y", token=None) is False
    assert len(mail.outbox) == 2


def test_a_refund_needing_attention_then_failing_gets_one_email_per_state(
    order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    _script(mock_rail, refund="timeout", fail_times=1)  # timed out before the rail acted
    refund = staff_refund(order)
    mail.outbox.clear()
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    mock_rail.enabled = False
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "needs_attention"
    # One to the owner, one to the admin: each their own (refunds.reconcile.attention).
    assert [m.subject.split(":")[0] for m in mail.outbox] == ["[Sill] Needs attention"] * 2
    mock_rail.enabled = True
    mock_rail.save()
    from refunds.reconcile.attention import check_refund_at_rail

    with django_capture_on_commit_callbacks(execute=True):
        assert check_refund_at_rail(refund.id) == "failed"  # the rail has no such refund
    assert [m.subject.split(":")[0] for m in mail.outbox] == [
        "[Sill] Needs attention",
        "[Sill] Needs attention",
        "[Sill] Refund failed",
        "[Sill] Refund failed",
    ]


def test_the_order_list_badges_and_filters_failed_and_held_refunds(
    client_for, make_order, order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    _declined(order, staff_refund, mock_rail, django_capture_on_commit_callbacks)
    held_order = make_order(total="99.00", email="held@example.com")
    _script(mock_rail)
    hold_refund(order=held_order, requested_by=client_for and _user("staff"))
    calm = make_order(email="calm@example.com")
    client = client_for("owner")

    body = client.get("/orders/").content.decode()
    assert "Refund failed" in body and "Refund held" in body

    failed_only = client.get("/orders/", {"status": "refund_failed"}).content.decode()
    assert f"#{order.number}" in failed_only
    assert f"#{held_order.number}" not in failed_only and f"#{calm.number}" not in failed_only
    held_only = client.get("/orders/", {"status": "refund_held"}).content.decode()
    assert f"#{held_order.number}" in held_only and f"#{order.number}" not in held_only
    # The order statuses still filter as before.
    assert f"#{calm.number}" in client.get("/orders/", {"status": "PAID"}).content.decode()


def _user(persona):
    from sill.accounts.models import Membership

    return Membership.objects.get(user__email=f"{persona}@roasters.example").user


def test_a_refund_made_again_clears_the_failure(
    client_for, order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    _declined(order, staff_refund, mock_rail, django_capture_on_commit_callbacks)
    _script(mock_rail)
    again = staff_refund(order)
    assert execute_refund(again.id) == "succeeded"
    body = client_for("owner").get("/orders/", {"status": "refund_failed"}).content.decode()
    assert f"#{order.number}" not in body
    page = client_for("owner").get(f"/orders/{order.id}/").content.decode()
    assert "failed: Declined by the rail" not in page


def test_a_failure_on_an_order_since_refunded_in_full_outside_sill_is_no_longer_a_to_do(
    client_for, make_order, order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    """The rail refused Sill's refund (``already_refunded``): the whole order had been
    refunded in its dashboard. Nothing is left to refund, so no later refund can supersede
    the failure: it stayed on every to-do list for ever."""
    refund = staff_refund(order)
    assert outside_refund(order) == "external refund recorded"
    with django_capture_on_commit_callbacks(execute=False):
        fail_refund(refund_id=refund.id, code="already_refunded", message="x", token=None)
    order.refresh_from_db()
    assert order.status == "REFUNDED"
    still_due = make_order(total="20.00", email="due@example.com")
    _declined(still_due, staff_refund, mock_rail, django_capture_on_commit_callbacks)
    owner = client_for("owner")

    dashboard = owner.get("/").content.decode()
    assert (
        '<a href="/refunds/?status=failed_open"><strong class="todo-count">1</strong>' in dashboard
    )
    listed = owner.get("/refunds/", {"status": "failed_open"}).content.decode()
    assert f"#{still_due.number}" in listed and f"#{order.number}" not in listed
    orders = owner.get("/orders/", {"status": "refund_failed"}).content.decode()
    assert f"#{still_due.number}" in orders and f"#{order.number}" not in orders
    # The order page still says why it failed, and the refund list still has it, as failed.
    page = owner.get(f"/orders/{order.id}/").content.decode()
    assert "the rail already holds a refund or dispute of this payment" in page
    assert refund.id in owner.get("/refunds/", {"status": "failed"}).content.decode()


@pytest.mark.parametrize(
    ("persona", "next_step"),
    [
        ("owner", "Nothing moved. Refund again from the form below."),
        ("staff", "Nothing moved. Refund again from the form below."),  # may refund
        ("reviewer", "can refund it again"),
    ],
)
def test_the_order_page_says_why_a_refund_failed_and_what_to_do(
    client_for,
    order,
    staff_refund,
    mock_rail,
    django_capture_on_commit_callbacks,
    persona,
    next_step,
):
    _declined(order, staff_refund, mock_rail, django_capture_on_commit_callbacks)
    page = client_for(persona).get(f"/orders/{order.id}/").content.decode()
    assert "refund on Mock failed: Declined by the rail." in page
    assert next_step in page
    assert "rail_declined" not in page


def test_the_order_page_shows_each_hold_as_pending_with_a_link(client_for, order):
    refund = hold_refund(order=order, requested_by=_user("staff"), amount_minor=5000)
    page = client_for("admin").get(f"/orders/{order.id}/").content.decode()
    assert "A $50.00 refund is awaiting approval" in page
    assert f'href="/held/{refund.id}/"' in page
    # Staff cannot open the held pages: the banner names who decides instead of linking.
    staff_page = client_for("staff").get(f"/orders/{order.id}/").content.decode()
    assert "A $50.00 refund is awaiting approval; an owner or admin decides it" in staff_page
    banner = staff_page[staff_page.index('id="refund-status"') :]
    assert f"/held/{refund.id}/" not in banner[: banner.index("</div>")]
