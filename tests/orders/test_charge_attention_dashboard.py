"""The dashboard lists a purchase's charge that needs attention beside the refunds that do:
owners and admins see it (who may decide held refunds), linking to the charge on its order
page; reviewers, staff and other sites do not. The list is bounded and costs one query."""

from __future__ import annotations

import pytest
from django.utils import timezone

from sill.orders.models import Charge, ChargeStatus, Order
from tests.orders.in_doubt import charge_in_doubt

pytestmark = pytest.mark.django_db

TITLE = "Charges that need attention"
# The dashboard an owner sees: 15 queries with nothing needing attention, one more for the
# charges that need attention (one read, with their orders, however many there are).
OWNER_DASHBOARD_QUERIES = 16


@pytest.fixture
def in_doubt(make_order, agent) -> Charge:
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )
    return charge_in_doubt(order)


def flagged(order: Order, *, reason: str = "the rail is switched off") -> Charge:
    """A pending charge of ``order`` left needing attention, as ``charging._flag`` leaves it."""
    return Charge.objects.create(
        order=order,
        rail="mock",
        amount_minor=order.total_minor,
        currency=order.currency,
        status=ChargeStatus.PENDING,
        attention_since=timezone.now(),
        attention_reason=reason,
    )


def link(charge: Charge) -> str:
    return f'href="/orders/{charge.order_id}/#charge-{charge.pk}"'


def test_owners_and_admins_see_it_and_reviewers_and_staff_do_not(client_for, in_doubt):
    for persona in ("owner", "admin"):
        page = client_for(persona).get("/").content.decode()
        assert TITLE in page
        assert link(in_doubt) in page and f"#{in_doubt.order.number}</a>" in page
        assert "$89.00" in page
        assert in_doubt.attention_reason[:40] in page  # what happened, in the rail's words
    for persona in ("reviewer", "staff"):
        page = client_for(persona).get("/").content.decode()
        assert TITLE not in page and link(in_doubt) not in page


def test_the_row_links_to_the_charge_on_its_order_page(client_for, in_doubt):
    dashboard = client_for("admin").get("/").content.decode()
    assert link(in_doubt) in dashboard
    order_page = client_for("admin").get(f"/orders/{in_doubt.order_id}/").content.decode()
    assert f'<article class="charge" id="charge-{in_doubt.pk}">' in order_page


def test_another_sites_charge_is_not_listed(client_for, make_order, other_site, in_doubt):
    theirs = flagged(make_order(on_site=other_site, status="PENDING", charged=False))
    page = client_for("owner").get("/").content.decode()
    assert link(in_doubt) in page and link(theirs) not in page
    outsider = client_for("outsider").get("/").content.decode()
    assert link(theirs) in outsider and link(in_doubt) not in outsider


def test_a_resolved_charge_leaves_the_list(client_for, in_doubt):
    assert link(in_doubt) in client_for("owner").get("/").content.decode()
    Charge.objects.filter(pk=in_doubt.pk).update(status=ChargeStatus.FAILED)
    assert TITLE not in client_for("owner").get("/").content.decode()


def test_the_list_is_bounded_and_costs_one_query(client_for, make_order, django_assert_num_queries):
    client = client_for("owner")
    oldest = flagged(make_order(status="PENDING", charged=False))
    client.get("/")  # warm: the session, the site context
    with django_assert_num_queries(OWNER_DASHBOARD_QUERIES):
        assert link(oldest) in client.get("/").content.decode()
    newer = [flagged(make_order(status="PENDING", charged=False)) for _ in range(21)]
    with django_assert_num_queries(OWNER_DASHBOARD_QUERIES):
        page = client.get("/").content.decode()
    # Oldest first, twenty of them: the newest waits for one of these to be resolved.
    assert page.count("#charge-") == 20
    assert link(oldest) in page and link(newer[-1]) not in page
