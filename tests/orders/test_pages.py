"""Orders pages: who may see them, what they show, and that queries don't grow with rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db

PERSONAS_ALLOWED = ["owner", "admin", "reviewer", "staff"]


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        ("owner", 200),
        ("admin", 200),
        ("reviewer", 200),
        ("staff", 200),
        ("outsider", 200),
        ("anonymous", 302),
    ],
)
@pytest.mark.parametrize("url", ["/", "/orders/"])
def test_it_gates_site_pages_by_login(client_for, persona, expected, url):
    response = client_for(persona).get(url)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("persona", PERSONAS_ALLOWED)
def test_it_shows_an_order_to_every_member_of_its_site(client_for, make_order, persona):
    order = make_order()
    response = client_for(persona).get(f"/orders/{order.id}/")
    assert response.status_code == 200
    assert b"$89.00" in response.content


def test_it_answers_404_for_another_sites_order(client_for, make_order, other_site):
    order = make_order(on_site=other_site)
    assert client_for("owner").get(f"/orders/{order.id}/").status_code == 404
    # ...and the outsider (a member of that other site) sees it.
    assert client_for("outsider").get(f"/orders/{order.id}/").status_code == 200


def test_it_redirects_anonymous_order_detail_to_login(client_for, make_order):
    order = make_order()
    response = client_for("anonymous").get(f"/orders/{order.id}/")
    assert response.status_code == 302
    assert "/login/?next=" in response["Location"]


def test_it_lists_only_this_sites_orders(client_for, make_order, other_site):
    mine = make_order(email="mine@example.com")
    theirs = make_order(on_site=other_site, email="theirs@example.com")
    body = client_for("owner").get("/orders/").content.decode()
    assert mine.number in body and "mine@example.com" in body
    assert "theirs@example.com" not in body
    assert theirs.id not in body


def test_it_searches_by_number_and_email_and_filters_by_status(client_for, make_order):
    a = make_order(email="alice@example.com")
    b = make_order(email="bob@example.com", status="SHIPPED")
    client = client_for("admin")
    body = client.get("/orders/", {"q": "alice@"}).content.decode()
    assert "alice@example.com" in body and "bob@example.com" not in body
    body = client.get("/orders/", {"q": b.number}).content.decode()
    assert "bob@example.com" in body and "alice@example.com" not in body
    body = client.get("/orders/", {"status": "SHIPPED"}).content.decode()
    assert "bob@example.com" in body and "alice@example.com" not in body
    assert a.number  # silence unused


def test_it_shows_an_empty_state(client_for):
    body = client_for("owner").get("/orders/").content.decode()
    assert "No orders yet" in body


def test_it_renders_the_results_partial_for_htmx(client_for, make_order):
    make_order(email="htmx@example.com")
    response = client_for("owner").get("/orders/", {"q": "htmx"}, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert 'id="results"' in body and "htmx@example.com" in body
    assert "<html" not in body


def _list_queries(client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/orders/").status_code == 200
    return len(ctx.captured_queries)


def test_it_runs_the_same_number_of_queries_for_5_and_50_orders(client_for, make_order):
    client = client_for("owner")
    for _ in range(5):
        make_order()
    five = _list_queries(client)
    for _ in range(45):
        make_order()
    fifty = _list_queries(client)
    assert five == fifty


def test_it_paginates(client_for, make_order):
    for _ in range(30):
        make_order()
    body = client_for("owner").get("/orders/").content.decode()
    assert "Page 1 of 2" in body
    body = client_for("owner").get("/orders/", {"page": 2}).content.decode()
    assert "Page 2 of 2" in body


def test_it_shows_items_charges_and_the_transactions_tab(client_for, make_order):
    order = make_order(total="12.50", currency="EUR")
    client = client_for("reviewer")
    body = client.get(f"/orders/{order.id}/").content.decode()
    assert "Items" in body and "Charges" in body and "€12.50" in body and "Transactions" in body
    body = client.get(f"/orders/{order.id}/", {"tab": "transactions"}).content.decode()
    assert 'id="transactions"' in body and "Charge" in body


def test_it_opens_an_order_by_its_source_mandate_id(client_for, make_order):
    order = make_order(source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN")
    response = client_for("owner").get("/orders/mnd_01K6HXAVBQ8G8PYZKN9JXJEPTN/")
    assert response.status_code == 200
    assert order.number in response.content.decode()


def test_the_transactions_tab_shows_no_orange_zero_for_an_order_never_charged(
    client_for, make_order
):
    # Seen on a refused purchase: an orange "0" beside Transactions, as if it needed attention.
    client = client_for("reviewer")
    never = make_order(status="PENDING", charged=False)
    body = client.get(f"/orders/{never.id}/").content.decode()
    assert ">Transactions</a>" in body and '<span class="count">0</span>' not in body
    charged = make_order(total="12.50", currency="EUR")
    body = client.get(f"/orders/{charged.id}/").content.decode()
    assert 'Transactions <span class="count">1</span>' in body
