"""Order numbers of agent purchases: sequential per site, taken from a counter row (not by
reading every order number of the site), and never the cause of a refused purchase.

Two purchases on one site at once both read the highest number before either committed and
chose the same next one: the second INSERT hit the (site, number) constraint, which agent
intake answered as a replayed nonce (409 ``replay``) for a purchase nobody had sent before.
"""

from __future__ import annotations

import threading
import time
import unicodedata
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from sill.money import parse_major
from sill.orders.models import Order
from sill.orders.services import NewLine, create_order, next_order_number
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


def _numbered(site, number: str | None = None) -> Order:
    line = NewLine(sku="SKU-1", name="Item", quantity=1, unit_price=parse_major("5.00", "USD"))
    return create_order(
        site=site, lines=[line], currency="USD", buyer_name="Buyer",
        buyer_email="buyer@example.com", number=number,
    )  # fmt: skip


def test_numbers_follow_the_highest_number_and_each_other(site) -> None:
    _numbered(site, "1041")
    _numbered(site, "#1100")  # not a number: not counted
    _numbered(site, "1007")
    assert [next_order_number(site) for _ in range(3)] == ["1042", "1043", "1044"]


def test_a_numbered_order_made_elsewhere_moves_the_next_number_past_it(site) -> None:
    assert next_order_number(site) == "1001"
    _numbered(site, "5000")  # e.g. a WooCommerce order synced with its number
    assert next_order_number(site) == "5001"
    _numbered(site, "2000")
    assert next_order_number(site) == "5002"


def test_the_next_number_reads_one_row_however_many_orders(
    site, django_assert_max_num_queries
) -> None:
    for n in range(20):
        _numbered(site, str(3000 + n))
    next_order_number(site)
    with django_assert_max_num_queries(2):
        assert next_order_number(site) == "3021"


def _send_while_the_first_is_open(bodies: list[bytes], held: str) -> dict[str, Any]:
    """Send ``bodies[0]`` (A), stopped right after its statement starting ``held`` with its
    transaction open, and ``bodies[1]`` (B) meanwhile; A goes on when B is done (or after
    3 s, when B waits for A). Both answers, by "a" and "b"."""
    a_held, b_done = threading.Event(), threading.Event()
    answers: dict[str, Any] = {}

    def hold(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith(held) and not a_held.is_set():
            a_held.set()
            b_done.wait(timeout=3)
        return result

    def run_a() -> None:
        try:
            with connection.execute_wrapper(hold):
                answers["a"] = post(Client(), bodies[0])
        finally:
            connection.close()

    def run_b() -> None:
        try:
            assert a_held.wait(timeout=30)
            answers["b"] = post(Client(), bodies[1])
        finally:
            b_done.set()
            connection.close()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for name in "ab":
        assert answers[name].status_code == 201, answers[name].content
    return answers


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_purchases_at_once_both_get_an_order(site, agent, sign, mock_rail) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's concurrent writers")
    bodies = [sign(purchase_intent(buyer={"name": n, "email": f"{n}@example.com"})) for n in "ab"]
    # B takes its number and tries its INSERT while A's is uncommitted.
    _send_while_the_first_is_open(bodies, 'INSERT INTO "orders_order"')
    numbers = sorted(Order.objects.filter(site=site).values_list("number", flat=True))
    assert len(numbers) == 2 and len(set(numbers)) == 2


@pytest.mark.postgres
def test_a_purchase_finds_its_buyer_by_an_index(site, agent, sign, mock_rail) -> None:
    """The buyer is looked up by email in any case: by the (site, UPPER(email)) index, not
    by reading every customer of the site."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's plans")
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        answer = post(Client(), sign(purchase_intent()))
    assert answer.status_code == 201, answer.content
    lookups = [
        q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")
        and 'FROM "orders_customer"' in q["sql"] and "UPPER" in q["sql"]
    ]  # fmt: skip
    assert lookups
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + lookups[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "customer_site_email_upper" in plan, plan


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_first_purchases_of_one_buyer_make_one_customer(site, agent, sign, mock_rail) -> None:
    """A buyer Sill has not seen, buying twice at once: both orders are the one customer's.
    Before, each purchase looked the buyer up, found nobody, and created a customer."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's concurrent writers")
    from sill.orders.models import Customer

    buyer = {"name": "Grace Hopper", "email": "grace@example.com"}
    bodies = [sign(purchase_intent(buyer=buyer)) for _ in range(2)]
    # B looks the buyer up while A's new customer is uncommitted.
    _send_while_the_first_is_open(bodies, 'INSERT INTO "orders_customer"')
    assert Customer.objects.filter(site=site, email__iexact=buyer["email"]).count() == 1
    assert Order.objects.filter(site=site, customer__email=buyer["email"]).count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_first_purchases_of_one_buyer_in_two_cases_make_one_customer(
    site, agent, sign, mock_rail
) -> None:
    """A new buyer whose email one purchase writes in capitals and another in lower case with
    a non-final sigma, as a naive lower-caser writes it (Python's lower() gives the final
    sigma): the buyer lookup (UPPER(email) = UPPER(%s)) takes them for one buyer, so they are
    one customer. Before, the lock that keeps a buyer's first purchases apart was keyed by
    Python's lower(), which took them for two: both purchases created a customer."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's concurrent writers")
    from sill.orders.models import Customer

    emails = ["ΗΛΙΑΣ@example.gr", "ηλιασ@example.gr"]
    assert emails[0].lower() != emails[1].lower()
    bodies = [sign(purchase_intent(buyer={"name": "Ilias", "email": e})) for e in emails]
    _send_while_the_first_is_open(bodies, 'INSERT INTO "orders_customer"')
    assert Customer.objects.filter(site=site).count() == 1
    assert Order.objects.filter(site=site, customer__isnull=False).count() == 2


def test_a_buyer_in_another_unicode_form_is_the_same_customer(site, agent, sign, mock_rail):
    """One address written composed (é), decomposed (e + U+0301) and in capitals: one
    customer, whose three orders carry the composed form (RFC 6532 asks for NFC), so the
    customer's refunds are counted together by the rules. Before, the decomposed form
    matched nobody and made a second customer."""
    from sill.orders.models import Customer

    composed = "josé@example.com"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    for email in (composed, decomposed, "JOSÉ@EXAMPLE.COM"):
        answer = post(Client(), sign(purchase_intent(buyer={"name": "José", "email": email})))
        assert answer.status_code == 201, answer.content
    (customer,) = Customer.objects.filter(site=site)
    assert customer.email == composed
    orders = Order.objects.filter(site=site)
    assert [o.customer_id for o in orders] == [customer.pk] * 3
    assert {o.buyer_email for o in orders} == {composed, "JOSÉ@EXAMPLE.COM"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sites_first_number_counts_a_numbered_order_being_made_meanwhile(site) -> None:
    """A store order synced with its own number (5000) while the site, which has no counter
    yet, takes its first sequential number: the first number waits for the synced order and
    comes after it. Before, it was seeded from the numbers already committed (1001), and the
    counter later reached 5000 and collided with the synced order."""
    made, numbered = threading.Event(), {}

    def sync() -> None:
        try:
            with transaction.atomic():
                numbered["synced"] = _numbered(site, "5000").number
                made.set()
                time.sleep(0.5)  # open while the first sequential number is asked for
        finally:
            made.set()
            connection.close()

    def purchase() -> None:
        try:
            assert made.wait(timeout=30)
            numbered["first"] = _numbered(site).number
        finally:
            connection.close()

    threads = [threading.Thread(target=sync), threading.Thread(target=purchase)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert numbered == {"synced": "5000", "first": "5001"}
    with transaction.atomic():
        assert next_order_number(site) == "5002"
