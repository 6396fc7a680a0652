"""The Reconciliation inbox page (/reconcile/) and its resolve form: roles, sites, bad input."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.models import AuditRecord
from refunds.labels import rail_refund_state_label
from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reconcile.differences import Difference, DisputeRow, missed_disputes
from refunds.reconcile.inbox import open_item
from sill.orders.models import Charge, Order

pytestmark = pytest.mark.django_db


def difference(n: int, kind: str = "missing_at_rail") -> Difference:
    return Difference(
        kind=kind,
        subject=f"re_item_{n}",
        provider_refund_id=f"re_item_{n}",
        currency="USD",
        sill_amount_minor=1000 + n,
        rail_amount_minor=900 + n if kind == "amount_differs" else None,
        rail_currency="USD" if kind == "amount_differs" else "",
        sill_status="succeeded",
        detail=f"Difference number {n}.",
    )


@pytest.fixture
def items(make_order):
    """Three open items on ``site``, on three orders."""
    made = []
    for n, kind in enumerate(["missing_at_rail", "amount_differs", "missing_in_sill"]):
        order = make_order(total="40.00", rail="stripe")
        charge = Charge.objects.get(order=order)
        open_item(
            charge=charge,
            difference=difference(n, kind),
            now=datetime(2026, 11, 30, 9, 30, tzinfo=UTC),
        )
        made.append(ReconciliationItem.objects.get(key=f"{kind}:re_item_{n}"))
    return made


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_it_shows_open_items_to_owners_and_admins(client_for, items, persona, site):
    site.timezone = "Europe/Berlin"
    site.save()
    page = client_for(persona).get("/reconcile/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "In Sill, not at the rail" in html and "Amounts differ" in html
    assert "At the rail, not in Sill" in html
    order = Order.objects.get(pk=items[0].order_id)
    assert f'href="/orders/{order.pk}/?tab=transactions">Order #{order.number}' in html
    assert "$10.00" in html and "$9.01" in html
    assert "Nov 30, 10:30 CET" in html  # 09:30 UTC in the site's zone
    assert 'href="/reconcile/"' in html  # the nav link


@pytest.mark.parametrize("persona", ["reviewer", "staff"])
def test_it_is_forbidden_to_reviewers_and_staff(client_for, items, persona):
    client = client_for(persona)
    assert client.get("/reconcile/").status_code == 403
    response = client.post(
        f"/reconcile/{items[0].pk}/resolve/", {"resolution": "acknowledged", "note": "x"}
    )
    assert response.status_code == 403
    assert ReconciliationItem.objects.get(pk=items[0].pk).resolved_at is None
    assert 'href="/reconcile/"' not in client.get("/").content.decode()


def test_anonymous_visitors_are_sent_to_log_in(client_for, items):
    response = client_for("anonymous").get("/reconcile/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_another_sites_owner_sees_none_of_it_and_cannot_resolve_it(client_for, items):
    client = client_for("outsider")
    html = client.get("/reconcile/").content.decode()
    assert "Sill's books and the rails agree." in html
    assert "re_item_0" not in html
    response = client.post(
        f"/reconcile/{items[0].pk}/resolve/", {"resolution": "acknowledged", "note": "mine?"}
    )
    assert response.status_code == 404
    assert ReconciliationItem.objects.get(pk=items[0].pk).resolved_at is None


def test_the_page_shows_an_empty_state(client_for, members):
    html = client_for("owner").get("/reconcile/").content.decode()
    assert "Sill's books and the rails agree." in html
    assert "No rail has been checked yet." in html


def test_its_queries_do_not_grow_with_the_items(
    client_for, items, make_order, django_assert_max_num_queries, site
):
    client = client_for("owner")
    ReconciliationRun.objects.create(site=site, rail="stripe", started_at=datetime.now(UTC))
    # 10: the page's two bounded counts (open differences, refunds needing attention) included.
    with django_assert_max_num_queries(10):
        assert client.get("/reconcile/").status_code == 200
    order = make_order(total="20.00", rail="stripe")
    for n in range(10, 20):
        open_item(charge=Charge.objects.get(order=order), difference=difference(n))
    client.post(
        f"/reconcile/{items[0].pk}/resolve/", {"resolution": "acknowledged", "note": "checked"}
    )
    with django_assert_max_num_queries(10):
        assert client.get("/reconcile/").status_code == 200


def test_an_owner_resolves_an_item_with_a_signed_record(client_for, items, site):
    item = items[1]
    response = client_for("owner").post(
        f"/reconcile/{item.pk}/resolve/",
        {"resolution": "recorded_in_sill", "note": "  Matched with the bank statement. "},
    )
    assert response.status_code == 302 and response["Location"] == "/reconcile/"
    item.refresh_from_db()
    assert (item.resolution, item.resolution_note) == (
        "recorded_in_sill",
        "Matched with the bank statement.",
    )
    assert item.resolved_by.get_username() == "owner@roasters.example"
    record = AuditRecord.objects.get(site=site, kind="reconciliation_resolved")
    assert record.subject_order_id == item.order_id
    assert '"resolution":"recorded_in_sill"' in record.payload
    html = client_for("owner").get("/reconcile/").content.decode()
    assert f'id="resolved-{item.pk}"' in html and f'id="item-{item.pk}"' not in html
    assert "Recorded in Sill" in html and "owner@roasters.example" in html


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"resolution": "acknowledged", "note": "   "}, "Write a short note"),
        ({"resolution": "cleared", "note": "sneaky"}, "Choose how this difference"),
        ({"resolution": "", "note": "x"}, "Choose how this difference"),
        ({"resolution": "acknowledged", "note": "x" * 1001}, "under 1000 characters"),
        ({"note": "\u00e9t\u00e9"}, "Choose how this difference"),
    ],
)
def test_bad_input_is_a_422_beside_the_form_and_nothing_is_written(
    client_for, items, data, message
):
    response = client_for("admin").post(f"/reconcile/{items[0].pk}/resolve/", data)
    assert response.status_code == 422
    html = response.content.decode()
    assert message in html and 'role="alert"' in html
    assert f'id="item-{items[0].pk}"' in html
    assert ReconciliationItem.objects.get(pk=items[0].pk).resolved_at is None
    assert not AuditRecord.objects.filter(kind="reconciliation_resolved").exists()


def test_a_second_resolve_answers_already_resolved(client_for, items):
    url = f"/reconcile/{items[0].pk}/resolve/"
    data = {"resolution": "acknowledged", "note": "seen"}
    assert client_for("owner").post(url, data).status_code == 302
    second = client_for("admin").post(url, data)
    assert second.status_code == 409
    assert "already resolved" in second.content.decode()
    assert AuditRecord.objects.filter(kind="reconciliation_resolved").count() == 1


@pytest.mark.parametrize("item_id", ["999999", "99999999999999999999999"])
def test_an_unknown_item_is_404(client_for, members, item_id):
    response = client_for("owner").post(
        f"/reconcile/{item_id}/resolve/", {"resolution": "acknowledged", "note": "x"}
    )
    assert response.status_code == 404


def test_resolving_needs_post_and_csrf(members, items):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    url = f"/reconcile/{items[0].pk}/resolve/"
    assert client.get(url).status_code == 405
    assert client.post(url, {"resolution": "acknowledged", "note": "x"}).status_code == 403
    assert ReconciliationItem.objects.get(pk=items[0].pk).resolved_at is None


def test_refunds_needing_attention_are_listed_with_a_link_to_their_resolution(
    client_for, make_order, site
):
    order = make_order(total="30.00")
    charge = Charge.objects.get(order=order)
    Charge.objects.filter(pk=charge.pk).update(amount_reserved_minor=3000)
    refund = Refund.objects.create(
        site=site,
        order=order,
        charge=charge,
        origin="staff",
        amount_minor=3000,
        currency="USD",
        rail="mock",
        decision="approved",
        status="needs_attention",
        attention_since=datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
    )
    owner = client_for("owner").get("/reconcile/").content.decode()
    assert "1 refund needs attention" in owner
    assert f'href="/orders/{order.pk}/#attention-{refund.id}">Resolve on the order page' in owner
    admin = client_for("admin").get("/reconcile/").content.decode()
    assert f'#attention-{refund.id}">Open the order' in admin


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("requires_action", "Waiting for the buyer"),
        ("canceled", "Cancelled"),
        ("succeeded", "Succeeded"),
    ],
)
def test_a_rail_refunds_state_reads_as_on_the_order_page(client_for, make_order, state, words):
    """Seen: the inbox worded the rail's state of a refund on its own: Stripe's
    ``requires_action`` read "Requires action" and ``canceled`` "Canceled", where the order
    page's Transactions tab says "Waiting for the buyer" and "Cancelled"
    (labels.rail_refund_state_label). Both now say the same."""
    order = make_order(total="40.00", rail="stripe")
    open_item(
        charge=Charge.objects.get(order=order),
        difference=Difference(
            kind="status_differs",
            subject="re_state",
            provider_refund_id="re_state",
            currency="USD",
            sill_amount_minor=1000,
            rail_amount_minor=1000,
            rail_currency="USD",
            sill_status="succeeded",
            rail_status=state,
            detail="The rail reports another status.",
        ),
    )
    html = client_for("owner").get("/reconcile/").content.decode()
    figures = html.split('<dl class="kv recon-figures">', 1)[1].split("</dl>", 1)[0]
    assert f"<dd>$10.00 · {words}</dd>" in figures.split("<dt>At Stripe</dt>", 1)[1]
    assert rail_refund_state_label(state) == words


@pytest.mark.parametrize(
    ("rail", "rail_name", "state", "words"),
    [
        ("paypal", "PayPal", "RESOLVED:RESOLVED_BUYER_FAVOUR", "Lost"),
        ("paypal", "PayPal", "WAITING_FOR_BUYER_RESPONSE", "Under review"),
        ("stripe", "Stripe", "warning_needs_response", "Needs response"),
    ],
)
def test_a_missed_disputes_state_at_the_rail_is_said_in_words(
    client_for, make_order, rail, rail_name, state, words
):
    """Seen: a dispute reconciliation found and Sill had missed showed the rail's own status
    word humanized under "At PayPal": "$40.00 · Resolved:resolved buyer favour", "Waiting for
    buyer response", Stripe's "Warning needs response". It now says the dispute's state as
    Sill names it everywhere else (Lost, Under review, Needs response)."""
    order = make_order(total="40.00", rail=rail)
    [found] = missed_disputes(
        rail=rail,
        currency="USD",
        before=set(),
        after=[
            DisputeRow(
                provider_dispute_id="PP-D-1",
                amount_minor=4000,
                currency="USD",
                status_label=words,
                rail_status=state,
            )
        ],
    )
    open_item(charge=Charge.objects.get(order=order), difference=found)
    html = client_for("owner").get("/reconcile/").content.decode()
    figures = html.split('<dl class="kv recon-figures">', 1)[1].split("</dl>", 1)[0]
    assert f"<dt>At {rail_name}</dt>\n      <dd>$40.00 · {words}</dd>" in figures
