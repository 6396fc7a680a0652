"""The dashboard directs: a to-do strip linking to its lists, 30 days of refunds as inline
SVG with a table alternative, and a setup checklist on an empty site; its query count is
fixed, whatever the number of refunds."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from refunds.execution import execute_refund
from refunds.models import Refund
from refunds.review.decisions import approve_refund, expire_held_refunds, reject_refund
from refunds.staff.charts import nice_max, percentile
from sill.orders.models import Charge
from tests.orders.in_doubt import charge_in_doubt
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db


def _script(rail, **config):
    rail.config = config
    rail.save()


def test_the_to_do_strip_counts_held_failed_and_attention_and_links_to_lists(
    client_for, make_order, order, staff_refund, mock_rail, members
):
    _script(mock_rail, refund="decline")
    assert execute_refund(staff_refund(order).id) == "failed"
    _script(mock_rail)
    hold_refund(order=make_order(total="99.00"), requested_by=members["staff"].user)
    body = client_for("owner").get("/").content.decode()
    assert '<a href="/refunds/?status=failed_open"><strong class="todo-count">1</strong>' in body
    assert '<a href="/held/"><strong class="todo-count">1</strong>' in body
    assert 'href="/refunds/?status=needs_attention"' in body
    assert 'href="/reconcile/"' in body
    # Staff see no links to pages they cannot open.
    staff = client_for("staff").get("/").content.decode()
    assert 'href="/held/"' not in staff and 'href="/reconcile/"' not in staff
    # The list the strip links to shows that refund.
    failed = client_for("owner").get("/refunds/", {"status": "failed_open"}).content.decode()
    assert f"#{order.number}" in failed


CHARGES_TODO = 'href="/#dashboard-charge-attention"><strong class="todo-count">{}</strong>'


def test_the_to_do_strip_counts_charges_needing_attention_for_those_who_see_them(
    client_for, make_order, agent
):
    assert "Charges need attention" not in client_for("owner").get("/").content.decode()
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )
    charge = charge_in_doubt(order)
    for persona in ("owner", "admin"):
        body = client_for(persona).get("/").content.decode()
        assert CHARGES_TODO.format(1) in body, persona
        assert 'id="dashboard-charge-attention"' in body  # where the strip's link goes
    for persona in ("reviewer", "staff"):
        assert "Charges need attention" not in client_for(persona).get("/").content.decode()
    # Past the dashboard's list of 20, the strip still counts them all.
    for i in range(21):
        Charge.objects.create(
            order=make_order(status="PENDING", charged=False, email=f"b{i}@example.com"),
            rail="mock", amount_minor=500, currency="USD", attention_since=timezone.now(),
            attention_reason="The rail did not answer.",
        )  # fmt: skip
    body = client_for("owner").get("/").content.decode()
    assert CHARGES_TODO.format(22) in body
    assert body.count('href="/orders/') >= 20 and str(charge.order.number) in body


def test_the_charts_are_inline_svg_with_a_title_and_a_table(
    client_for, order, staff_refund, mock_rail
):
    assert execute_refund(staff_refund(order).id) == "succeeded"
    body = client_for("admin").get("/").content.decode()
    assert body.count('role="img"') >= 3
    assert '<title id="per-day-svg-title">Refunds per day for the last 30 days' in body
    assert "Show as a table" in body
    assert "Defective" in body  # the top reason, in words
    assert "Approved by the rules" in body
    assert "· 100%</text>" in body and ">100%</td>" in body  # "100 %" before, unlike Sill
    assert "<script" not in body.split("</main>")[0].split("<main")[-1]


def test_an_empty_site_gets_a_setup_checklist(client_for, site):
    body = client_for("owner").get("/").content.decode()
    assert "Finish setting up" in body
    for url in (
        "/settings/rails/",
        "/settings/reasons/",
        "/settings/members/",
        "/settings/agents/",
    ):
        assert f'href="{url}"' in body
    assert "(done)" in body  # the owner has colleagues (the test personas)
    assert "(not done yet)" in body
    assert "Finish setting up" not in client_for("reviewer").get("/").content.decode()


def test_the_dashboard_query_count_does_not_grow_with_refunds(
    client_for, make_order, staff_refund, mock_rail, django_assert_max_num_queries
):
    client = client_for("owner")
    assert execute_refund(staff_refund(make_order()).id) == "succeeded"
    client.get("/")
    with django_assert_max_num_queries(30) as first:
        client.get("/")
    baseline = len(first.captured_queries)
    for days in range(20):
        order = make_order(days_ago=days)
        refund = staff_refund(order)
        Refund.objects.filter(pk=refund.pk).update(
            status="failed", created_at=timezone.now() - timedelta(days=days)
        )
        Charge.objects.filter(order=order).update(amount_reserved_minor=0)
    with django_assert_max_num_queries(baseline):
        client.get("/")


def test_chart_arithmetic():
    assert [nice_max(v) for v in (0, 1, 3, 7, 12, 51)] == [1, 1, 5, 10, 20, 100]
    assert percentile([], 0.5) is None
    assert percentile([10, 20, 30, 40], 0.5) == 25
    assert percentile([1.0] * 9 + [100.0], 0.9) == pytest.approx(10.9)


def test_approval_time_is_measured_from_held_to_decided(client_for, order, members):
    refund = hold_refund(order=order, requested_by=members["staff"].user)
    approve_refund(
        refund=refund, actor=members["owner"].user, now=refund.created_at + timedelta(minutes=12)
    )
    body = client_for("owner").get("/").content.decode()
    assert "1 decision" in body and "12 min" in body


def _outcome(body: str, words: str, count: int) -> bool:
    """The "What the rules decided" table says ``count`` for ``words``."""
    cells = (
        f'<td data-label="Outcome">{words}</td><td data-label="Refunds" class="num">{count}</td>'
    )
    return cells in body


def test_a_held_refund_a_person_decided_or_that_expired_was_held_by_the_rules(
    client_for, make_order, members
):
    """Deciding a held refund (or its expiry) rewrites its decision; the rules still held it."""
    staff, owner = members["staff"].user, members["owner"].user
    approved = hold_refund(order=make_order(total="30.00"), requested_by=staff)
    approve_refund(refund=approved, actor=owner)
    reject_refund(refund=hold_refund(order=make_order(total="31.00"), requested_by=staff),
                  actor=owner)  # fmt: skip
    held_at = timezone.now() - timedelta(days=2)
    hold_refund(order=make_order(total="32.00"), requested_by=staff, held_at=held_at)
    assert expire_held_refunds() == 1
    hold_refund(order=make_order(total="33.00"), requested_by=staff)
    body = client_for("owner").get("/").content.decode()
    assert _outcome(body, "Held for review", 4)
    assert _outcome(body, "Approved by the rules", 0)
    assert _outcome(body, "Rejected by the rules", 0)
    assert "2 decisions" in body  # the approval and the rejection; the expiry is nobody's


def test_a_failed_credit_the_customer_was_credited_again_is_no_longer_a_to_do(
    client_for, site, agent
):
    # A failed credit's email says "ask for the credit again"; a credit names no order, so the
    # later credit that did it never counted as refunding again and the to-do stayed forever.
    from sill.orders.models import Customer

    cora = Customer.objects.create(site=site, rail_customer_id="cus_Cora", email="c@example.com")
    other = Customer.objects.create(site=site, rail_customer_id="cus_Other", email="o@ex.com")
    now = timezone.now()

    def credit(customer, status, minutes_ago):
        return Refund.objects.create(
            site=site, kind="customer_credit", origin="agent", agent=agent, customer=customer,
            rail="stripe", amount_minor=500, currency="USD", decision="approved", status=status,
            created_at=now - timedelta(minutes=minutes_ago),
        )  # fmt: skip

    failed = credit(cora, "failed", 30)
    still_failed = credit(other, "failed", 20)
    credit(cora, "succeeded", 10)
    body = client_for("owner").get("/").content.decode()
    assert '<a href="/refunds/?status=failed_open"><strong class="todo-count">1</strong>' in body
    listed = client_for("owner").get("/refunds/", {"status": "failed_open"}).content.decode()
    assert still_failed.id in listed and failed.id not in listed


def test_refunded_counts_refunds_of_charges_not_customer_credits(
    client_for, site, agent, order, staff_refund, mock_rail
):
    # A credit to the customer's balance at Stripe returns no charge: "Refunded" that counts it
    # matches no refund the rail reports (an accountant's reconciliation is off by every credit).
    from sill.orders.models import Customer

    assert execute_refund(staff_refund(order).id) == "succeeded"
    cora = Customer.objects.create(site=site, rail_customer_id="cus_Cora", email="c@example.com")
    Refund.objects.create(
        site=site, kind="customer_credit", origin="agent", agent=agent, customer=cora,
        rail="stripe", amount_minor=1250, currency="USD", decision="approved",
        status="succeeded",
    )  # fmt: skip
    body = client_for("owner").get("/").content.decode()
    assert '<span class="label">Refunded</span><strong>$89.00</strong>' in body


def _section(body: str, heading_id: str) -> str:
    """The dashboard's ``<section>`` headed by ``heading_id``."""
    start = body.index(f'aria-labelledby="{heading_id}"')
    return body[start : body.index("</section>", start)]


def test_it_says_no_refunds_instead_of_drawing_an_empty_chart(client_for, site):
    # A new site's "Refunds per day" drew a bare 0-to-1 axis with no bars and offered it "as a
    # table", beside cards that said "No refunds in the last 30 days" in words.
    per_day = _section(client_for("owner").get("/").content.decode(), "per-day-title")
    assert "No refunds in the last 30 days." in per_day
    assert "<svg" not in per_day and "Show as a table" not in per_day
    assert "asked by agents" not in per_day  # no colour key for a chart that is not there
