"""The order page's refund status area polls while a refund is in flight, and stops once
the refund settled, showing it without a reload (``?part=status`` is the partial)."""

from __future__ import annotations

import pytest

from refunds.execution import execute_refund

pytestmark = pytest.mark.django_db


def test_it_polls_while_a_refund_is_processing_and_stops_when_it_settles(
    client_for, order, staff_refund
):
    refund = staff_refund(order)  # decided and reserved; its execution has not run
    client = client_for("owner")
    page = client.get(f"/orders/{order.id}/").content.decode()
    assert 'hx-trigger="every 3s"' in page
    assert f'hx-get="/orders/{order.id}/?part=status"' in page

    partial = client.get(f"/orders/{order.id}/?part=status", HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert partial.status_code == 200
    assert "<html" not in body and body.lstrip().startswith('<div id="refund-status"')
    assert 'hx-trigger="every 3s"' in body
    assert "A $89.00 refund is being sent to Mock" in body

    assert execute_refund(refund.id) == "succeeded"
    body = client.get(f"/orders/{order.id}/?part=status", HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in body  # the swap removes the trigger: polling stops
    assert "$89.00 refunded on Mock" in body
    assert 'id="order-status-badge" hx-swap-oob="true"' in body and "Refunded" in body


def test_nothing_in_flight_means_no_polling(client_for, order):
    page = client_for("staff").get(f"/orders/{order.id}/").content.decode()
    assert 'hx-trigger="every 3s"' not in page


def test_the_status_partial_is_scoped_to_the_site(client_for, order):
    assert client_for("outsider").get(f"/orders/{order.id}/?part=status").status_code == 404
    assert client_for("anonymous").get(f"/orders/{order.id}/?part=status").status_code == 302


def test_the_status_partial_takes_a_fixed_number_of_queries(
    client_for, order, staff_refund, django_assert_max_num_queries
):
    staff_refund(order)
    client = client_for("owner")
    client.get(f"/orders/{order.id}/?part=status")  # warm the session
    with django_assert_max_num_queries(8):
        client.get(f"/orders/{order.id}/?part=status")


def test_a_refund_needing_attention_polls_and_says_the_next_step(
    client_for, order, staff_refund, mock_rail
):
    from refunds.execution import RetryLater, execute_refund

    mock_rail.config = {"refund": "timeout", "fail_times": 1}
    mock_rail.save()
    refund = staff_refund(order)
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    mock_rail.enabled = False
    mock_rail.save()
    assert execute_refund(refund.id) == "needs_attention"
    owner = client_for("owner").get(f"/orders/{order.id}/?part=status").content.decode()
    assert 'hx-trigger="every 3s"' in owner
    assert "needs attention: The rail is off or not connected." in owner
    assert 'href="/reconcile/"' in owner
    staff = client_for("staff").get(f"/orders/{order.id}/?part=status").content.decode()
    assert "Sill is asking the rail again" in staff and "/reconcile/" not in staff


def test_the_order_page_query_count_does_not_grow_with_refunds(
    client_for, make_order, staff_refund, mock_rail, django_assert_max_num_queries
):
    from refunds.execution import execute_refund
    from sill.orders.models import Charge, Order

    order = make_order(total="500.00")
    client = client_for("owner")

    def refund_once(script):
        mock_rail.config = {"refund": script}
        mock_rail.save()
        refund = staff_refund(order)
        execute_refund(refund.id)
        # Make the whole amount refundable again, so the next refund can be made.
        Charge.objects.filter(order=order).update(amount_reserved_minor=0, amount_refunded_minor=0)
        Order.objects.filter(pk=order.pk).update(status="PAID")

    refund_once("decline")
    client.get(f"/orders/{order.id}/")
    with django_assert_max_num_queries(40) as one:
        client.get(f"/orders/{order.id}/")
    for script in ("decline", "succeed", "decline", "succeed"):
        refund_once(script)
    with django_assert_max_num_queries(len(one.captured_queries)):
        client.get(f"/orders/{order.id}/")
