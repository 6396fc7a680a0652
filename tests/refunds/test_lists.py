"""The order and refund lists: date filters in the site's time zone, CSV export that is safe
to open in a spreadsheet, paging, and query counts that do not grow with the rows."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.staff.csv_export import safe_cell
from sill.orders.models import Order

pytestmark = pytest.mark.django_db


def _csv(response) -> list[list[str]]:
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("Ada", "Ada"),
        (None, ""),
    ],
)
def test_a_cell_never_starts_a_formula(value, cell):
    assert safe_cell(value) == cell


def test_the_order_csv_has_the_filters_words_and_money_in_major_units(client_for, make_order, site):
    site.timezone = "America/New_York"
    site.save()
    evil = make_order(total="89.00", email="=cmd@example.com")
    make_order(total="12.50", days_ago=40)
    rows = _csv(client_for("owner").get("/orders/", {"format": "csv", "q": "=cmd"}))
    header, *body = rows
    assert header[:3] == ["Order", "Placed", "Buyer"]
    assert len(body) == 1
    row = dict(zip(header, body[0], strict=True))
    assert row["Email"] == "'=cmd@example.com"
    assert (row["Total"], row["Currency"]) == ("89.00", "USD")
    assert row["Order"] == evil.number
    placed = datetime.fromisoformat(row["Placed"])
    assert placed.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4))  # New York


def test_the_order_list_filters_by_days_in_the_site_zone(client_for, make_order, site):
    site.timezone = "America/New_York"
    site.save()
    order = make_order(email="late@example.com")
    # 02:30 UTC on Dec 1 is 21:30 on Nov 30 in New York.
    at = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
    Order.objects.filter(pk=order.pk).update(created_at=at)
    client = client_for("owner")
    nov_30 = client.get("/orders/", {"from": "2026-11-30", "to": "2026-11-30"})
    assert "late@example.com" in nov_30.content.decode()
    assert "late@example.com" not in client.get("/orders/", {"from": "2026-12-01"}).content.decode()
    body = client.get("/orders/", {"from": "not-a-day"}).content.decode()
    assert "From is not a date" in body and "late@example.com" in body


@pytest.mark.parametrize("url", ["/orders/", "/refunds/"])
def test_the_lists_take_the_last_day_of_the_calendar(client_for, make_order, staff_refund, url):
    # Its end (the next midnight) is past what a datetime holds: it was a 500.
    order = make_order()
    staff_refund(order)
    client = client_for("staff")
    everything = client.get(url, {"to": "9999-12-31"})
    assert everything.status_code == 200 and order.number in everything.content.decode()
    assert client.get(url, {"from": "9999-12-31"}).status_code == 200
    export = _csv(client.get(url, {"to": "9999-12-31", "format": "csv"}))
    assert any(order.number in row for row in export)


@pytest.mark.parametrize("url", ["/orders/", "/refunds/"])
def test_the_lists_take_the_first_day_of_the_calendar_east_of_utc(
    client_for, make_order, staff_refund, site, url
):
    # Its midnight in Tokyo is still year 0 in UTC: the database's conversion overflowed (500).
    site.timezone = "Asia/Tokyo"
    site.save()
    order = make_order()
    staff_refund(order)
    client = client_for("staff")
    everything = client.get(url, {"from": "0001-01-01"})
    assert everything.status_code == 200 and order.number in everything.content.decode()
    export = _csv(client.get(url, {"from": "0001-01-01", "format": "csv"}))
    assert any(order.number in row for row in export)
    assert order.number not in client.get(url, {"to": "0001-01-01"}).content.decode()


def test_the_order_list_pages_in_a_fixed_number_of_queries(
    client_for, make_order, django_assert_max_num_queries
):
    client = client_for("owner")
    make_order()
    client.get("/orders/")
    with django_assert_max_num_queries(12) as few:
        client.get("/orders/")
    for _ in range(30):
        make_order()
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get("/orders/")
    assert "Page 1 of 2" in response.content.decode()
    with django_assert_max_num_queries(len(few.captured_queries)):
        rows = _csv(client.get("/orders/", {"format": "csv"}))
    assert len(rows) == 32


def _refunds(order, staff_refund, mock_rail, n):
    made = []
    for _ in range(n):
        made.append(staff_refund(order))
        Refund.objects.filter(pk=made[-1].pk).update(status="failed", outcome_code="rail_declined")
        # a failed refund releases its reservation
        from sill.orders.models import Charge

        Charge.objects.filter(order=order).update(amount_reserved_minor=0)
    return made


def test_the_refund_list_shows_words_filters_and_exports(
    client_for, make_order, staff_refund, mock_rail
):
    order = make_order(total="89.00", email="=buyer@example.com")
    _refunds(order, staff_refund, mock_rail, 2)
    other = make_order(total="20.00")
    staff_refund(other)
    client = client_for("reviewer")
    body = client.get("/refunds/").content.decode()
    assert "Declined by the rail" in body and "rail_declined" not in body
    assert body.count('class="row-bad"') == 2
    failures = client.get("/refunds/", {"status": "failures"}).content.decode()
    assert f"#{order.number}" in failures and f"#{other.number}" not in failures
    processing = client.get("/refunds/", {"status": "processing"}).content.decode()
    assert f"#{other.number}" in processing and f"#{order.number}" not in processing
    rows = _csv(client.get("/refunds/", {"format": "csv", "status": "failures"}))
    header, *body_rows = rows
    assert len(body_rows) == 2
    row = dict(zip(header, body_rows[0], strict=True))
    assert (row["Amount"], row["Currency"], row["Status"]) == ("89.00", "USD", "Failed")
    assert row["Outcome"] == "Declined by the rail"


def test_the_refund_csv_says_the_rules_decided_and_when(client_for, order, staff_refund):
    """A refund the rules approved had "Decided by" and "Decided" empty, though its page shows
    the decision and its time (the decision record's)."""
    refund = staff_refund(order)
    assert (refund.decision, refund.decided_by, refund.decided_at) == ("approved", None, None)
    header, *rows = _csv(client_for("owner").get("/refunds/", {"format": "csv"}))
    [row] = [dict(zip(header, r, strict=True)) for r in rows]
    record = AuditRecord.objects.get(site=order.site, hash=refund.decision_hash)
    assert row["Decided by"] == "rules"
    assert row["Decided"] == record.created_at.astimezone(order.site.zone).isoformat()


def test_the_refund_list_is_scoped_to_the_site(client_for, make_order, staff_refund, other_site):
    order = make_order()
    refund = staff_refund(order)
    assert refund.id not in client_for("outsider").get("/refunds/").content.decode()
    assert client_for("anonymous").get("/refunds/").status_code == 302
    csv_rows = _csv(client_for("outsider").get("/refunds/", {"format": "csv"}))
    assert len(csv_rows) == 1  # the header only
    assert refund.id in client_for("staff").get("/refunds/", {"format": "csv"}).getvalue().decode()


def test_the_refund_list_pages_in_a_fixed_number_of_queries(
    client_for, make_order, staff_refund, mock_rail, django_assert_max_num_queries
):
    client = client_for("owner")
    _refunds(make_order(), staff_refund, mock_rail, 1)
    client.get("/refunds/")
    with django_assert_max_num_queries(12) as few:
        client.get("/refunds/")
    for _ in range(10):
        _refunds(make_order(), staff_refund, mock_rail, 3)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get("/refunds/")
    assert "Page 1 of 2" in response.content.decode()


def test_a_held_refund_links_to_its_review_page_only_for_those_who_may_review(
    client_for, order, members
):
    from tests.refunds.conftest import hold_refund

    refund = hold_refund(order=order, requested_by=members["staff"].user)
    reviewer = client_for("reviewer").get("/refunds/", {"status": "held"}).content.decode()
    assert f'href="/held/{refund.id}/"' in reviewer
    staff = client_for("staff").get("/refunds/", {"status": "held"}).content.decode()
    assert f'href="/held/{refund.id}/"' not in staff
    assert f'href="/orders/{order.id}/"' in staff
