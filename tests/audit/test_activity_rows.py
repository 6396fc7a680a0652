"""Activity's rows say what each record's body says: its badge, its actor, its order number.

Reported (issue 16): an "auto-refund" badge on every policy change (the body's ``auto_refund``
is the whole setting, always truthy), "By —" on records that name their actor, and order ids
where order numbers belong.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.services import append_record
from policies.catalog import item_by_id
from policies.services import apply_catalog_item, set_auto_refund
from refunds.reasons.services import add_reason
from sill.accounts import two_factor
from sill.money import Money
from sill.orders.charge_attention import resolve_charge_attention
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db


def _rows(client) -> list[str]:
    body = client.get("/activity/").content.decode()
    tbody = body.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.sub(r"\s+", " ", row) for row in tbody.split("<tr")[1:]]


def _cell(row: str, n: int) -> str:
    """The text of the ``n``-th cell of ``row`` (tags stripped)."""
    cells = row.split("<td")[1:]
    return re.sub(r"<[^>]+>", "", cells[n].split(">", 1)[1]).strip()


BY = 6  # the "By" column


def test_a_policy_change_has_no_auto_refund_badge_unless_it_changed_auto_refund(
    client_for, site, members
):
    owner = members["owner"].user
    item = item_by_id("conservative")
    assert item is not None
    apply_catalog_item(site=site, actor=owner, item=item, params={"holdOverUsd": "50.00"})
    set_auto_refund(
        site=site,
        actor=owner,
        enabled=True,
        cap=Money(2500, "USD"),
        second_factor=two_factor.OPERATOR,
    )
    newest, oldest = _rows(client_for("owner"))
    assert "auto-refund" not in oldest  # applying a template changed only the rules
    assert "auto-refund on" in newest
    set_auto_refund(
        site=site,
        actor=owner,
        enabled=False,
        cap=Money(2500, "USD"),
        second_factor=two_factor.OPERATOR,
    )
    assert "auto-refund off" in _rows(client_for("owner"))[0]


def test_a_decision_is_badged_only_when_it_was_an_auto_refund(client_for, site):
    with transaction.atomic():
        append_record(site=site, kind="approved", body={"refund_id": "rf_a", "auto_refund": True})
        append_record(site=site, kind="approved", body={"refund_id": "rf_b", "auto_refund": False})
    plain, auto = _rows(client_for("owner"))
    assert "auto-refund" in auto and "auto-refund" not in plain


def test_it_names_the_actor_each_kind_of_record_names(client_for, site, members):
    owner = members["owner"].user
    item = item_by_id("conservative")
    assert item is not None
    apply_catalog_item(site=site, actor=owner, item=item, params={"holdOverUsd": "50.00"})
    add_reason(site=site, actor=owner, name="Arrived broken")
    with transaction.atomic():
        append_record(
            site=site,
            kind="attention_resolved",
            body={"refund_id": "rf_1", "resolved_by": "admin@roasters.example"},
        )
        append_record(
            site=site,
            kind="reconciliation_resolved",
            body={"item_id": 1, "refund_id": None, "resolved_by": "owner@roasters.example"},
        )
        append_record(
            site=site,
            kind="escalated_rejected",
            body={"refund_id": "rf_2", "reviewer": None, "acted_by": None, "reason": "expired"},
        )
        append_record(
            site=site,
            kind="settlement",
            body={"refund_id": "rf_3", "agent_id": "agent_x", "rail": "mock"},
        )
    by = [_cell(row, BY) for row in _rows(client_for("owner"))]
    assert by == [
        "Sill",  # a settlement: Sill executed it, not the agent that asked
        "Sill (expired)",
        "owner@roasters.example",  # reconciliation resolved
        "admin@roasters.example",  # attention resolved
        "owner@roasters.example",  # reason change ("actor")
        "owner@roasters.example",  # policy change ("actor")
    ]


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"outcome": "charged", "provider_charge_id": "mock_ch_seen"}, "Charge recorded as charged (mock_ch_seen)"),
        ({"outcome": "not_charged"}, "Charge recorded as not charged; the order was cancelled"),
    ],
)  # fmt: skip
def test_an_owners_word_on_a_charge_says_what_they_recorded(
    client_for, make_order, agent, members, form, words
):
    order = make_order(status="PENDING", charged=False, placed_by_agent=agent)
    resolve_charge_attention(charge=charge_in_doubt(order), actor=members["owner"].user, **form)
    resolved, flagged = _rows(client_for("owner"))
    assert "Attention resolved" in resolved and words in resolved
    assert f"#{order.number}" in resolved
    assert _cell(resolved, BY) == "owner@roasters.example"
    assert "Charge recorded" not in flagged


def test_it_shows_order_numbers_in_one_query_per_page(client_for, site, make_order):
    orders = [make_order() for _ in range(3)]
    with transaction.atomic():
        for order in orders:
            append_record(
                site=site,
                kind="approved",
                body={"refund_id": f"rf_{order.pk}", "order_id": order.pk},
            )
    client = client_for("owner")
    client.get("/activity/")
    body = client.get("/activity/").content.decode()
    for order in orders:
        assert f'href="/orders/{order.pk}/">#{order.number}</a>' in body
    # Add more records about more orders: the page's queries stay the same.
    with CaptureQueriesContext(connection) as few:
        client.get("/activity/")
    more = [make_order() for _ in range(5)]
    with transaction.atomic():
        for order in more:
            append_record(site=site, kind="approved", body={"order_id": order.pk})
    with CaptureQueriesContext(connection) as many:
        client.get("/activity/")
    assert len(many.captured_queries) == len(few.captured_queries)
    order_reads = [q for q in many.captured_queries if 'FROM "orders_order"' in q["sql"]]
    assert len(order_reads) == 1


def test_every_refund_id_links_to_its_refund_page(client_for, site):
    with transaction.atomic():
        append_record(site=site, kind="approved", body={"refund_id": "rf_link"})
    body = client_for("reviewer").get("/activity/").content.decode()
    assert 'href="/refunds/rf_link/"' in body


def test_an_agent_is_named_by_its_name_with_its_id_beside_it(client_for, site, agent):
    # Seen: a purchase's "Purchase approved" and "Purchase refused" rows were "By
    # agent_test_shopper", where the order page says "by the agent Test shopper".
    with transaction.atomic():
        append_record(
            site=site,
            kind="approved",
            body={"kind": "purchase", "agent_id": agent.agent_id, "rail": "mock"},
        )
        append_record(site=site, kind="rejected", body={"agent_id": "agent_since_removed"})
    removed, approved = _rows(client_for("owner"))
    by = approved.split("<td")[BY + 1]
    assert re.search(r">Test shopper<br><code[^>]*>agent_test_shopper</code>", by), by
    # An agent no longer on the site keeps the id its record names.
    assert _cell(removed, BY) == "agent_since_removed"
