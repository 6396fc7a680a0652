"""One confirmation before money moves (issue 15, item 2), and live status (item 7).

A form POST that would move money without ``confirmed=1`` (what sill.js adds once its dialog
is confirmed) moves nothing and answers a confirmation naming the amount, the buyer, the rail
and who tells the buyer; without JavaScript that page's own form confirms. JSON callers of the
approve endpoint and the staff API are not forms and are unchanged.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditRecord
from refunds.models import Refund
from refunds.review.decisions import approve_refund
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

SENTENCE = "Refund $89.00 to Buyer (buyer@example.com) on Mock?"


def _moved_nothing(refund: Refund | None = None) -> None:
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    assert not AuditRecord.objects.filter(kind="escalated_approved").exists()
    if refund is not None:
        assert Refund.objects.get(pk=refund.pk).status == "held"


def _hidden(body: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', body)
    assert match, name
    return match.group(1)


# --- approving a held refund ------------------------------------------------------------


def test_an_unconfirmed_approval_answers_a_confirmation_page(
    client_for, held, django_capture_on_commit_callbacks
):
    client = client_for("admin")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/held/{held.id}/approve/", {"note": "ok", "next": "/held/"})
    assert response.status_code == 200
    body = response.content.decode()
    assert SENTENCE in body and "a confirmation once the refund goes through" in body
    assert 'name="confirmed" value="1"' in body and 'name="next" value="/held/"' in body
    assert ">ok</textarea>" in body  # the note typed before is kept
    _moved_nothing(held)
    # The page's own form confirms it (no JavaScript needed).
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"/held/{held.id}/approve/", {"confirmed": "1", "note": "ok"})
    assert done.status_code == 302
    assert Refund.objects.get(pk=held.pk).status == "succeeded"


def test_htmx_gets_the_confirmation_in_place_of_the_row_or_the_panel(client_for, held):
    client = client_for("admin")
    row = client.post(
        f"/held/{held.id}/approve/",
        headers={"HX-Request": "true", "HX-Target": f"held-row-{held.id}"},
    ).content.decode()
    assert row.lstrip().startswith(f'<tr id="held-row-{held.id}" class="held-row confirming">')
    assert f'hx-target="#held-row-{held.id}"' in row and SENTENCE in row
    panel = client.post(
        f"/held/{held.id}/approve/",
        headers={"HX-Request": "true", "HX-Target": "decision-panel"},
    ).content.decode()
    assert '<article id="decision-panel" class="decision confirming">' in panel
    assert 'hx-target="#decision-panel"' in panel and "<html" not in panel
    _moved_nothing(held)


def test_json_callers_approve_without_a_confirmation(
    client_for, held, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for("admin").post(
            f"/held/{held.id}/approve/", headers={"Accept": "application/json"}
        )
    assert response.status_code == 200 and response.json()["decision"] == "approved"


def test_reject_needs_no_server_confirmation(client_for, held):
    assert client_for("admin").post(f"/held/{held.id}/reject/").status_code == 302
    assert Refund.objects.get(pk=held.pk).status == "rejected"


def test_a_reviewer_gets_no_confirmation_only_the_refusal(client_for, held):
    assert client_for("reviewer").post(f"/held/{held.id}/approve/").status_code == 403
    _moved_nothing(held)


def test_an_outsider_gets_404_not_a_confirmation(client_for, held):
    assert client_for("outsider").post(f"/held/{held.id}/approve/").status_code == 404
    _moved_nothing(held)


# --- a staff refund ----------------------------------------------------------------------


def _form(client, order) -> dict[str, str]:
    page = client.get(f"/orders/{order.id}/").content.decode()
    names = ("idempotency_key", "expected_remaining_minor", "expected_refund_count")
    return {name: _hidden(page, name) for name in names}


def test_an_unconfirmed_staff_refund_shows_the_computed_amount_and_writes_nothing(
    client_for, order, leaf, django_capture_on_commit_callbacks
):
    client = client_for("staff")
    form = {**_form(client, order), "kind": "percentage", "percentage": "50"}
    form["reason"] = str(leaf.pk)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/orders/{order.id}/refund/", form)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Confirm the refund" in body
    assert "Refund $44.50 to Buyer (buyer@example.com) on Mock?" in body
    assert "50% of the $89.00 order total is $44.50" in body
    # The confirmation posts the same fields, the same key, the amount shown and confirmed=1.
    confirm = body[body.index('class="refund-card refund-confirm"') :]
    assert _hidden(confirm, "idempotency_key") == form["idempotency_key"]
    assert _hidden(confirm, "confirmed_amount_minor") == "4450"
    assert _hidden(confirm, "percentage") == "50"
    assert 'name="confirmed" value="1"' in confirm
    assert (
        not Refund.objects.exists() and Charge.objects.get(order=order).amount_refunded_minor == 0
    )
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', confirm))
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"/orders/{order.id}/refund/", {**fields, "confirmed": "1"})
    assert done.status_code == 303
    assert Charge.objects.get(order=order).amount_refunded_minor == 4450


@pytest.mark.parametrize(
    ("kind", "extra"), [("full", {}), ("amount", {"amount": "89.00"})], ids=["full", "amount"]
)
def test_a_confirmed_refund_never_moves_other_than_the_amount_confirmed(
    client_for, order, leaf, kind, extra, django_capture_on_commit_callbacks
):
    """The confirmation showed $39.00 (say, while a $50.00 refund was still reserved, which
    then failed and released it), and the form carries no order snapshot (rendered before
    the snapshot fields existed, or stripped): pressing "Refund $39.00" moved $89.00, since
    only a percentage refund compared the confirmed amount. It is checked under the order's
    lock for every kind: the order changed, nothing moves."""
    form = {
        "kind": kind, **extra, "reason": str(leaf.pk), "confirmed_amount_minor": "3900",
        "confirmed": "1", "idempotency_key": "k-confirmed-3900",
    }  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        answer = client_for("staff").post(f"/orders/{order.id}/refund/", form)
    assert answer.status_code == 422  # the form again, with why
    body = answer.content.decode()
    assert "changed since you confirmed: this refund now comes to $89.00" in body
    assert not Refund.objects.filter(order=order).exists()
    assert Charge.objects.get(order=order).amount_refunded_minor == 0


def test_the_htmx_confirmation_replaces_the_panel(client_for, order, leaf):
    client = client_for("staff")
    form = {**_form(client, order), "kind": "full", "reason": str(leaf.pk)}
    response = client.post(f"/orders/{order.id}/refund/", form, headers={"HX-Request": "true"})
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="refund-panel"') and "<html" not in body
    assert "Refund $89.00" in body and not Refund.objects.exists()


def test_change_on_the_confirmation_gives_the_form_back(client_for, order, leaf):
    client = client_for("staff")
    form = {**_form(client, order), "kind": "amount", "amount": "12.00", "reason": str(leaf.pk)}
    response = client.post(f"/orders/{order.id}/refund/", {**form, "edit": "1"})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="refund-amount" name="amount" value="12.00"' in body
    assert "Confirm the refund" not in body and not Refund.objects.exists()


def test_a_bad_reason_is_refused_before_the_confirmation(client_for, order, leaf):
    client = client_for("staff")
    form = {**_form(client, order), "kind": "full", "reason": "999999"}
    response = client.post(f"/orders/{order.id}/refund/", form)
    assert response.status_code == 422
    assert "Confirm the refund" not in response.content.decode()


def test_the_staff_api_needs_no_confirmation(client_for, order, leaf):
    import json

    response = client_for("staff").post(
        f"/api/order/{order.id}/refund",
        json.dumps({"full": True, "reasonId": leaf.pk}),
        content_type="application/json",
    )
    assert response.status_code in (200, 201), response.content


# --- live status --------------------------------------------------------------------------


def test_an_approved_row_polls_until_it_settles(
    client_for, held, members, django_capture_on_commit_callbacks
):
    # The reported defect: an approved row stayed "Processing" until a reload.
    approve_refund(refund=held, actor=members["admin"].user)  # execution not run yet
    client = client_for("admin")
    headers = {"HX-Request": "true", "HX-Target": f"held-row-{held.id}"}
    row = client.get(f"/held/{held.id}/", headers=headers).content.decode()
    assert 'hx-trigger="every 3s"' in row and "is being refunded on Mock" in row
    assert "<html" not in row
    from refunds.execution import execute_refund

    execute_refund(held.id)
    settled = client.get(f"/held/{held.id}/", headers=headers).content.decode()
    assert "hx-trigger" not in settled  # no trigger: the polling stops
    assert "Approved: $89.00 was refunded on Mock." in settled


def test_the_detail_panel_stops_polling_once_settled(
    client_for, held, members, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)
    panel = (
        client_for("owner")
        .get(f"/held/{held.id}/", headers={"HX-Request": "true", "HX-Target": "decision-panel"})
        .content.decode()
    )
    assert "hx-trigger" not in panel.split('id="decision-panel"', 1)[1].split(">", 1)[0]
    assert "Refunded" in panel


# --- the held list groups holds of one order --------------------------------------------


def test_the_held_list_groups_holds_of_one_order(client_for, make_order, members, mock_rail, agent):
    shared = make_order(total="99.00")
    hold_refund(order=shared, requested_by=members["staff"].user, amount_minor=2000)
    hold_refund(order=shared, requested_by=members["staff"].user, amount_minor=3000)
    hold_refund(order=make_order(), agent=agent)
    body = client_for("owner").get("/held/").content.decode()
    assert body.count('<tbody class="held-group">') == 2
    assert body.count(f">Order #{shared.number}</a>") == 1
    assert "2 held refunds, $50.00 in all" in body


def test_the_held_list_queries_do_not_grow_with_holds_of_one_order(
    client_for, make_order, members, mock_rail
):
    shared = make_order(total="99.00")
    client = client_for("owner")
    hold_refund(order=shared, requested_by=members["staff"].user, amount_minor=1000)
    with CaptureQueriesContext(connection) as one:
        client.get("/held/")
    for _ in range(4):
        hold_refund(order=shared, requested_by=members["staff"].user, amount_minor=1000)
    with CaptureQueriesContext(connection) as five:
        client.get("/held/")
    assert len(five.captured_queries) == len(one.captured_queries)


def test_the_outcome_message_names_the_rule_in_words(
    client_for, site, order, leaf, django_capture_on_commit_callbacks
):
    from tests.refunds.conftest import require_approval

    require_approval(site, origin="staff")
    client = client_for("staff")
    form = {**_form(client, order), "kind": "full", "reason": str(leaf.pk), "confirmed": "1"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/orders/{order.id}/refund/", form, follow=True)
    body = response.content.decode()
    assert "your rule “Conservative / manual review” asked for approval" in body
