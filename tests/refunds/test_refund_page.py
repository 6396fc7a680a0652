"""The refund page (/refunds/<refund_id>/): every refund's timeline, order and evidence."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from audit.models import AuditRecord
from audit.services import append_record
from refunds.execution import RetryLater, execute_refund
from refunds.models import DecidedVia, Refund
from refunds.review.decisions import DecisionRefused, approve_refund, reject_refund
from refunds.review.slack import SLACK_NOTE
from refunds.services import refund_body
from sill.orders.outside import OutsideRefund, record_outside_refund
from tests.refunds.conftest import ORIGINAL, hold_refund, open_dispute, post, refund_intent

pytestmark = pytest.mark.django_db


def url(refund: Refund) -> str:
    return f"/refunds/{refund.pk}/"


def page(client: Client, refund: Refund) -> str:
    response = client.get(url(refund))
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.fixture
def settled_staff_refund(staff_refund, order) -> Refund:
    """A staff refund the rules approved (never held), executed on the mock rail."""
    refund = staff_refund(order)
    assert refund.expires_at is None and refund.status == "processing"
    assert execute_refund(refund.pk) == "succeeded"
    return Refund.objects.get(pk=refund.pk)


# --- who may see it ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("owner", 200),
        ("admin", 200),
        ("reviewer", 200),
        ("staff", 200),  # staff with the refund permission
        ("clerk", 403),  # staff without it
        ("outsider", 404),  # another site's owner
        ("anonymous", 302),
    ],
)
def test_it_gates_the_page_by_role_and_site(as_, held, persona, status):
    assert as_(persona).get(url(held)).status_code == status


def test_another_sites_refund_is_not_found(client_for, other_site, make_order, members):
    theirs = hold_refund(
        order=make_order(on_site=other_site), requested_by=members["outsider"].user
    )
    assert client_for("owner").get(url(theirs)).status_code == 404
    assert client_for("outsider").get(url(theirs)).status_code == 200


def test_an_unknown_refund_is_not_found(client_for):
    assert client_for("owner").get("/refunds/rf_nope/").status_code == 404


# --- what it shows ----------------------------------------------------------------------------


def test_a_staff_refund_that_was_never_held_has_a_page(client_for, settled_staff_refund, order):
    refund = settled_staff_refund
    body = page(client_for("reviewer"), refund)
    assert "Staff member staff@roasters.example asked for a refund" in body
    assert "Approved by the rules" in body
    assert "$89.00 refunded on Mock" in body
    assert refund.provider_refund_id in body
    # The original order, by number, linked; the customer.
    assert f'href="/orders/{order.pk}/"' in body and f"Order #{order.number}" in body
    assert "Buyer (buyer@example.com)" in body
    assert "Defective" in body  # the reason, in words
    # Each record-backed step shows its seq and hash prefix.
    for record in AuditRecord.objects.filter(subject_refund_id=refund.pk):
        assert f"#{record.seq}" in body and record.hash[:12] in body
    assert "Review" not in _stages(body)  # never held: no review step


def test_an_agent_refund_held_then_approved_shows_its_review(
    client_for, held, members, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user, note="Customer sent photos")
    body = page(client_for("owner"), held)
    assert _stages(body) == ["Request", "Decision", "Review", "Settlement"]
    assert "Agent Test shopper sent a signed mandate" in body and "agent_test_shopper" in body
    assert held.mandate is not None and held.mandate.mandate_id in body
    assert "Held for review by the rules" in body
    assert "Approved by admin@roasters.example" in body
    assert "Customer sent photos" in body
    assert "refunded on Mock" in body


@pytest.mark.parametrize("decide", [approve_refund, reject_refund])
def test_a_review_says_where_it_was_decided(client_for, held, members, decide):
    """Seen: a refund decided in Slack said "Approved by owner@…" over a quoted note
    “Decided in Slack”, as if the owner had typed it, and one decided in Sill said nowhere
    where; the status panel said "in Slack" / "in Sill". The review step now says where, from
    the record's own field, and Sill's own note is not quoted as the person's."""
    owner = members["owner"].user
    decide(refund=held, actor=owner, note=SLACK_NOTE, via=DecidedVia.SLACK)
    body = page(client_for("owner"), held)
    done = "Approved" if decide is approve_refund else "Rejected"
    assert f"{done} by owner@roasters.example in Slack</" in body
    assert "“Decided in Slack”" not in body


def test_a_review_decided_in_sill_says_so_and_keeps_the_note(client_for, held, members):
    approve_refund(refund=held, actor=members["owner"].user, note="Customer sent photos")
    body = page(client_for("owner"), held)
    assert "Approved by owner@roasters.example in Sill</" in body
    assert "“Customer sent photos”" in body


def test_the_original_order_counts_what_was_refunded_outside_sill(client_for, held):
    """Seen: an order refunded in full in the rail's dashboard showed its "Refunded" badge over
    "Refunded so far $0.00" on the refund page; the order page says "+ $X outside Sill"."""
    charge = held.order.charges.get()
    now = timezone.now()
    record_outside_refund(
        charge=charge,
        refund=OutsideRefund(provider_refund_id="re_dashboard", amount_minor=2000,
                             currency="USD", status="succeeded", created_at_rail=now),
        event_id="evt_dashboard", event_at=now,
    )  # fmt: skip
    body = page(client_for("owner"), held)
    assert "<dt>Refunded so far</dt>" in body
    assert '$0.00 <span class="muted small">+ $20.00 outside Sill</span>' in body


def test_it_says_the_rules_and_facts_in_words_with_the_raw_facts_folded(client_for, held):
    body = page(client_for("reviewer"), held)
    # r07 by its catalog title and action, its condition and the value it read.
    assert "Human review on destructive actions (r07)" in body
    assert "Hold for approval" in body
    assert "Origin is “agent”" in body and "read: Agent" in body
    # Facts by the vocabulary's labels; the raw snapshot inside <details>.
    assert "Refund amount in USD" in body and "$89.00" in body
    assert '<details class="raw"><summary>The facts as recorded</summary>' in body
    assert "refundAmountUsd" in body.split("The facts as recorded", 1)[1]
    # A held refund waits for a review.
    assert "Waiting for an owner or admin" in body


def test_it_shows_outside_events_about_the_refund(client_for, settled_staff_refund):
    refund = settled_staff_refund
    with transaction.atomic():
        append_record(
            site=refund.site,
            kind="refund_reversed",
            body=refund_body(refund, message="The bank returned it", source="evt_123"),
        )
    body = page(client_for("owner"), refund)
    assert _stages(body)[-1] == "Afterwards"
    assert "failed after settlement" in body and "The bank returned it" in body


def test_a_failed_refund_says_why_in_the_words_the_order_page_uses(
    client_for, staff_refund, order, mock_rail, django_capture_on_commit_callbacks
):
    """Seen: the Outcome of a refund the rail declined read only the rail's own message
    ("mock rail: the refund was declined (scripted)"), while the order page's banner and its
    Transactions row said "Declined by the rail" first. All three now say Sill's words, then
    the rail's."""
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=False):  # no email: not what this reads
        assert execute_refund(refund.pk) == "failed"
    said = "mock rail: the refund was declined (scripted)"
    body = page(client_for("owner"), refund)
    outcome = body.split("<dt>Outcome</dt><dd>", 1)[1].split("</dd>", 1)[0]
    assert outcome == f'Declined by the rail. <span class="muted">{said}</span>'
    # The timeline's settlement says it alike (it read the rail's message alone).
    assert f"<dt>Why</dt><dd>Declined by the rail. {said}</dd>" in body
    order_page = client_for("owner").get(f"/orders/{order.pk}/").content.decode()
    assert f'failed: Declined by the rail.</strong> <span class="muted">{said}</span>' in order_page
    tab = client_for("owner").get(f"/orders/{order.pk}/", {"tab": "transactions"})
    row = tab.content.decode().split(f'data-refund-id="{refund.pk}">', 1)[1].split("</tr>")[0]
    assert f'<span class="muted small">Declined by the rail. {said}</span>' in row


def test_a_request_rejected_before_any_order_was_found_has_a_page(
    client_for, sign, agent, mock_rail
):
    answer = post(Client(), sign(refund_intent(ORIGINAL))).json()
    assert answer["reason"] == "original_not_charged"
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.order is None
    body = page(client_for("owner"), refund)
    assert "Rejected" in body and "The original order was not charged" in body
    assert "Sill found no original order for this request" in body


# --- live status --------------------------------------------------------------------------------


def test_the_status_panel_polls_while_processing_and_stops_when_settled(
    client_for, staff_refund, order
):
    refund = staff_refund(order)
    client = client_for("owner")
    body = page(client, refund)
    assert 'hx-trigger="every 3s"' in body
    assert f'hx-get="/refunds/{refund.pk}/"' in body

    execute_refund(refund.pk)
    polled = client.get(url(refund), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="refund-status")
    text = polled.content.decode()
    assert polled.status_code == 200
    assert "<html" not in text and 'id="refund-status"' in text
    assert "hx-trigger" not in text  # settled: the panel stops polling
    assert 'id="refund-timeline" hx-swap-oob="true"' in text
    assert "refunded on Mock" in text


def test_a_refund_that_needs_attention_polls_and_says_so(
    client_for, staff_refund, order, mock_rail, django_capture_on_commit_callbacks
):
    mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    mock_rail.save()
    refund = staff_refund(order)
    with pytest.raises(RetryLater):
        execute_refund(refund.pk)
    mock_rail.enabled = False
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=False):
        assert execute_refund(refund.pk) == "needs_attention"
    body = page(client_for("owner"), refund)
    assert 'hx-trigger="every 3s"' in body
    assert "Needs attention: the rail has not confirmed the refund" in body
    assert _stages(body)[-1] == "Afterwards"


# --- evidence ---------------------------------------------------------------------------------


def test_the_evidence_link_appears_once_the_download_exists(client_for, held):
    body = page(client_for("owner"), held)
    try:
        link = reverse("refunds:evidence", args=[held.pk])
    except NoReverseMatch:
        assert "Download evidence" not in body
    else:
        assert f'href="{link}"' in body and "Download evidence" in body


def test_staff_who_cannot_read_the_log_get_no_evidence_link(client_for, held):
    # The bundle is the audit log's (Activity's readers); a refunder is told who can get it.
    body = page(client_for("staff"), held)
    assert "Download evidence" not in body and "This refund in Activity" not in body
    assert "Owners, admins and reviewers can download" in body


# --- queries --------------------------------------------------------------------------------------


def test_its_queries_do_not_grow_with_the_records(
    client_for, settled_staff_refund, django_assert_max_num_queries
):
    refund = settled_staff_refund
    client = client_for("owner")
    client.get(url(refund))  # warm the session
    with django_assert_max_num_queries(8) as few:
        page(client, refund)
    with transaction.atomic():
        for n in range(15):
            append_record(
                site=refund.site,
                kind="needs_attention",
                body=refund_body(refund, message=f"attempt {n}", attempts=n),
            )
    with django_assert_max_num_queries(8) as many:
        body = page(client, refund)
    assert "attempt 14" in body
    assert len(many.captured_queries) == len(few.captured_queries)


def _stages(body: str) -> list[str]:
    """The stage labels of the timeline, in order."""
    timeline = body.split('id="refund-timeline"', 1)[1].split("</ol>", 1)[0]
    return [part.split("</span>", 1)[0] for part in timeline.split('<span class="stage">')[1:]]


def test_an_approval_sill_refused_is_not_called_the_approvers_rejection(client_for, held, members):
    """The admin pressed Approve and Sill refused it (a dispute opened since the hold): the
    timeline said "Rejected by admin@…", while the held page said "Refused on approval"."""
    open_dispute(held)
    with pytest.raises(DecisionRefused):
        approve_refund(refund=held, actor=members["admin"].user)
    body = page(client_for("owner"), held)
    assert "Rejected by admin@roasters.example" not in body
    assert "Approved by admin@roasters.example in Sill; Sill refused it" in body
    assert "The charge is disputed" in body
