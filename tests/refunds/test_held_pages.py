"""The held pages and decision forms: who may do what, what they show, htmx and no-JS paths."""

from __future__ import annotations

import html
import json
from datetime import UTC, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import DecidedVia, Refund
from refunds.review.decisions import approve_refund, reject_refund
from sill.orders.models import Charge, Dispute, Order
from sill.rails.models import MockLedgerEntry, RailAccount
from sill.rails.shopify.sync import sync_orders
from tests.rails.shopify_fixtures import shopify, shopify_account  # noqa: F401 (fixtures)
from tests.rails.shopify_stub import SHOP
from tests.refunds.conftest import hold_refund, open_dispute

pytestmark = pytest.mark.django_db

HEADLINE = "Refund request · Wrong item · up to $89.00"


def status_of(refund: Refund) -> str:
    return Refund.objects.get(pk=refund.pk).status


# --- who may do what ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        ("owner", 200),
        ("admin", 200),
        ("reviewer", 200),
        ("staff", 403),
        ("outsider", 200),  # their own site's queue, which is empty
        ("anonymous", 302),
    ],
)
def test_it_gates_the_held_list(client_for, held, persona, expected):
    response = client_for(persona).get("/held/")
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/?next=/held/")
    if persona == "outsider":
        assert held.id not in response.content.decode()
        assert "Nothing is waiting for review" in response.content.decode()


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        ("owner", 200),
        ("admin", 200),
        ("reviewer", 200),
        ("staff", 403),
        ("outsider", 404),
        ("anonymous", 302),
    ],
)
def test_it_gates_the_held_detail(client_for, held, persona, expected):
    response = client_for(persona).get(f"/held/{held.id}/")
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize(
    ("persona", "expected", "outcome"),
    [
        ("owner", 302, None),
        ("admin", 302, None),
        ("reviewer", 403, "held"),
        ("staff", 403, "held"),
        ("outsider", 404, "held"),
        ("anonymous", 302, "held"),
    ],
)
def test_it_gates_the_decisions(
    client_for, held, persona, expected, outcome, action, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(persona).post(
            f"/held/{held.id}/{action}/", {"note": "x", "confirmed": "1"}
        )
    assert response.status_code == expected
    if persona == "anonymous":
        assert response["Location"].startswith("/login/")
    want = outcome or {"approve": "succeeded", "reject": "rejected"}[action]
    assert status_of(held) == want
    decisions = AuditRecord.objects.filter(kind__in=["escalated_approved", "escalated_rejected"])
    assert decisions.count() == (0 if outcome else 1)
    if not outcome:
        # Decided in Sill's pages, and the signed record says so.
        assert json.loads(decisions.get().payload)["body"]["via"] == "sill"
        assert Refund.objects.get(pk=held.pk).decided_via == "sill"


def test_the_requester_gets_403_on_approve_and_may_reject(client_for, members, original):
    refund = hold_refund(order=original, requested_by=members["admin"].user)
    client = client_for("admin")
    response = client.post(f"/held/{refund.id}/approve/")
    assert response.status_code == 403
    assert "another owner or admin has to approve it" in response.content.decode()
    assert status_of(refund) == "held"
    # The page shows the requester no Approve button, only Reject (withdraw).
    page = client.get(f"/held/{refund.id}/").content.decode()
    assert f"/held/{refund.id}/approve/" not in page and f"/held/{refund.id}/reject/" in page
    assert client.post(f"/held/{refund.id}/reject/").status_code == 302
    assert status_of(refund) == "rejected"


def test_the_requester_gets_403_over_htmx_and_json(client_for, members, original):
    refund = hold_refund(order=original, requested_by=members["admin"].user)
    client = client_for("admin")
    response = client.post(
        f"/held/{refund.id}/approve/",
        headers={"HX-Request": "true", "HX-Target": "decision-panel"},
    )
    assert response.status_code == 403
    assert "another owner or admin" in response.content.decode()
    response = client.post(f"/held/{refund.id}/approve/", headers={"Accept": "application/json"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "requester_cannot_approve"


def test_a_get_to_a_decision_url_is_not_allowed(client_for, held):
    assert client_for("owner").get(f"/held/{held.id}/approve/").status_code == 405
    assert status_of(held) == "held"


def test_a_refund_that_was_never_held_has_no_held_page(client_for, original, agent):
    held_one = hold_refund(order=original, agent=agent)
    Refund.objects.filter(pk=held_one.pk).update(expires_at=None)
    assert client_for("owner").get(f"/held/{held_one.id}/").status_code == 404


# --- the list -----------------------------------------------------------------------------


def test_the_list_shows_what_a_reviewer_needs(client_for, held):
    body = client_for("reviewer").get("/held/").content.decode()
    assert HEADLINE in body
    assert "agent_test_shopper" in body and "$89.00" in body
    assert f'data-countdown="{held.expires_at.isoformat()}"' in body
    assert "hours" in body and "left" in body  # the countdown without JavaScript
    # The rule by its title and its action in words, never the bare id or action code.
    assert "Human review on destructive actions (r07)" in body and "Hold for approval" in body
    assert "require_approval" not in body
    assert 'id="held-count">1<' in body
    # Reviewers inspect; they get no decision controls.
    assert "/approve/" not in body and "/reject/" not in body
    assert "an owner or admin decides" in body


def test_deciders_get_approve_and_reject_on_each_row(client_for, held):
    body = client_for("admin").get("/held/").content.decode()
    assert f'action="/held/{held.id}/approve/"' in body
    assert f'action="/held/{held.id}/reject/"' in body
    assert "data-confirm=" in body


def test_each_rows_buttons_say_which_refund_they_decide(client_for, held, make_order, agent):
    # Approve was named for its refund, but a screen reader listed the other controls as
    # "Reject, Reject, Review →, Review →", one pair per row, with nothing to tell them apart.
    hold_refund(order=make_order(total="12.00", email="cora@example.com"), agent=agent)
    body = client_for("admin").get("/held/").content.decode()
    for amount, email in (("$89.00", "buyer@example.com"), ("$12.00", "cora@example.com")):
        to = f"{amount} refund to Buyer ({email})"
        assert f'aria-label="Reject the {to}">Reject</button>' in body
        assert f'aria-label="Review the {to}">Review&nbsp;→</a>' in body


def test_the_list_is_oldest_first(client_for, make_order, agent, members):
    now = timezone.now()
    newer = hold_refund(order=make_order(), agent=agent, held_at=now - timedelta(hours=1))
    older = hold_refund(
        order=make_order(),
        requested_by=members["staff"].user,
        reason_code="",
        reason_label="Damaged in transit",
        held_at=now - timedelta(hours=5),
    )
    body = client_for("owner").get("/held/").content.decode()
    assert body.index(older.id) < body.index(newer.id)
    assert "Staff refund · Damaged in transit · $89.00" in body  # exact: no "up to"
    assert "staff@roasters.example" in body


def test_the_filters(client_for, make_order, agent, members, site):
    from sill.accounts.models import Agent

    other_agent = Agent.objects.create(
        site=site, agent_id="agent_other", name="Other", refund_enabled=True
    )
    wrong = hold_refund(order=make_order(total="89.00"), agent=agent)
    defective = hold_refund(
        order=make_order(total="20.00"), agent=other_agent, reason_code="defective"
    )
    staff = hold_refund(
        order=make_order(total="150.00"),
        requested_by=members["staff"].user,
        reason_code="",
        reason_label="Damaged in transit",
    )
    client = client_for("owner")

    def ids(**query):
        body = client.get("/held/", query).content.decode()
        return {r.id for r in (wrong, defective, staff) if r.id in body}

    assert ids() == {wrong.id, defective.id, staff.id}
    assert ids(reason="defective") == {defective.id}
    assert ids(reason="Damaged in transit") == {staff.id}
    assert ids(agent="agent_test_shopper") == {wrong.id}
    assert ids(agent="staff") == {staff.id}
    assert ids(amount_min="50") == {wrong.id, staff.id}
    assert ids(amount_max="89.00") == {wrong.id, defective.id}
    assert ids(amount_min="21", amount_max="100") == {wrong.id}
    assert ids(amount_min="nonsense") == {wrong.id, defective.id, staff.id}
    body = client.get("/held/").content.decode()
    assert '<option value="defective"' in body and '<option value="staff"' in body
    # Each agent by the name the merchant gave it, as the rows say it (the options read
    # "agent_test_shopper", "agent_other": the ids).
    assert '<option value="agent_test_shopper" >Test shopper (agent)</option>' in body
    assert '<option value="agent_other" >Other (agent)</option>' in body
    empty = client.get("/held/", {"amount_min": "1000"}).content.decode()
    assert "No held refunds match these filters." in empty


def test_the_filters_answer_the_results_partial_for_htmx(client_for, held):
    response = client_for("owner").get(
        "/held/",
        {"reason": "wrong_item"},
        headers={"HX-Request": "true", "HX-Target": "held-results"},
    )
    body = response.content.decode()
    assert 'id="held-results"' in body and HEADLINE in body and "<html" not in body


def test_the_empty_state_and_a_hidden_counter(client_for, members):
    body = client_for("owner").get("/held/").content.decode()
    assert "Nothing is waiting for review." in body
    assert 'id="held-count" hidden>0<' in body


def _list_queries(client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/held/").status_code == 200
    return len(ctx.captured_queries)


def test_it_runs_the_same_number_of_queries_for_2_and_20_held(
    client_for, make_order, agent, members
):
    client = client_for("admin")

    def add(n: int) -> None:
        for i in range(n):
            if i % 2:
                hold_refund(order=make_order(), agent=agent)
            else:
                hold_refund(order=make_order(), requested_by=members["staff"].user)

    add(2)
    two = _list_queries(client)
    add(18)
    twenty = _list_queries(client)
    assert two == twenty
    assert Refund.objects.filter(status="held").count() == 20


# --- deciding from the pages --------------------------------------------------------------


def test_a_plain_post_redirects_back_with_a_flash(
    client_for, held, django_capture_on_commit_callbacks
):
    client = client_for("admin")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/held/{held.id}/approve/",
            {"note": "Photos check out", "next": "/held/", "confirmed": "1"},
        )
    assert response.status_code == 302 and response["Location"] == "/held/"
    body = client.get("/held/").content.decode()
    # Rendered before the execution task ran (it is enqueued on commit).
    assert "Approved: $89.00 is being refunded on Mock." in body
    assert status_of(held) == "succeeded"
    assert Refund.objects.get(pk=held.pk).review_note == "Photos check out"
    # An unsafe next falls back to the refund's page.
    other = client.post(f"/held/{held.id}/reject/", {"next": "https://evil.example/"})
    assert other["Location"] == f"/held/{held.id}/"


@pytest.mark.django_db(transaction=True)
def test_an_approval_that_already_needs_attention_is_not_said_to_have_refunded_nothing(
    client_for, held, mock_rail, settings
):
    """The rail timed out on the only attempt allowed: by the time the answer was built (the
    execution ran as the decision committed, as a fast worker does) the refund needed
    attention, and the flash said "Approved: nothing was refunded." though the rail may
    hold the refund."""
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    mock_rail.config = {"refund": "timeout"}
    mock_rail.save()
    client = client_for("admin")
    response = client.post(
        f"/held/{held.id}/approve/", {"next": "/held/", "confirmed": "1"}, follow=True
    )
    assert status_of(held) == "needs_attention"
    body = html.unescape(response.content.decode())
    assert "nothing was refunded" not in body
    assert (
        "Approved: the rail may have made the refund of $89.00 and has not confirmed it; "
        "an owner can check it on the order."
    ) in body


def test_a_second_plain_post_is_told_it_was_already_decided(client_for, held):
    assert client_for("owner").post(f"/held/{held.id}/reject/").status_code == 302
    client = client_for("admin")
    response = client.post(f"/held/{held.id}/approve/", {"confirmed": "1"}, follow=True)
    body = response.content.decode()
    assert (
        "Nothing changed: owner@roasters.example had already rejected this refund in Sill" in body
    )
    assert status_of(held) == "rejected"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0


def test_a_decision_after_one_in_slack_says_who_where_and_when(client_for, members, held):
    """The held page said "already decided: rejected by owner@…", neither where nor when,
    while a Slack click finding the same refund decided was told both."""
    reject_refund(refund=held, actor=members["owner"].user, via=DecidedVia.SLACK)
    decided_at = Refund.objects.get(pk=held.pk).decided_at.astimezone(UTC)

    response = client_for("admin").post(
        f"/held/{held.id}/approve/", {"confirmed": "1"}, follow=True
    )

    when = f"{decided_at:%b} {decided_at.day}, {decided_at:%H:%M} UTC"
    assert (
        f"Nothing changed: owner@roasters.example had already rejected this refund in Slack "
        f"({when})."
    ) in html.unescape(response.content.decode())
    assert status_of(held) == "rejected"


def test_htmx_swaps_the_row_and_the_counter(
    client_for, held, make_order, agent, django_capture_on_commit_callbacks
):
    hold_refund(order=make_order(), agent=agent)  # another one keeps the counter at 1
    client = client_for("admin")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/held/{held.id}/approve/",
            {"confirmed": "1"},
            headers={"HX-Request": "true", "HX-Target": f"held-row-{held.id}"},
        )
    assert response.status_code == 200
    body = response.content.decode()
    assert f'<tr id="held-row-{held.id}" class="held-row decided"' in body
    assert "Approved: $89.00 is being refunded on Mock." in body
    assert 'id="held-count" hx-swap-oob="true">1<' in body
    assert "<html" not in body
    assert status_of(held) == "succeeded"


def test_htmx_hides_the_counter_at_zero_and_a_second_decision_is_409(client_for, held):
    headers = {"HX-Request": "true", "HX-Target": f"held-row-{held.id}"}
    response = client_for("owner").post(f"/held/{held.id}/reject/", headers=headers)
    assert response.status_code == 200
    assert 'id="held-count" hx-swap-oob="true" hidden>0<' in response.content.decode()
    again = client_for("admin").post(
        f"/held/{held.id}/approve/", {"confirmed": "1"}, headers=headers
    )
    assert again.status_code == 409
    assert "had already rejected this refund" in again.content.decode()
    assert status_of(held) == "rejected"


def test_json_clients_get_the_state_or_409(client_for, held):
    accept = {"Accept": "application/json"}
    first = client_for("owner").post(f"/held/{held.id}/reject/", headers=accept)
    assert first.status_code == 200
    assert first.json() == {
        "refund_id": held.id,
        "status": "rejected",
        "decision": "rejected",
        "reason": "rejected_by_reviewer",
        "decided_by": "owner@roasters.example",
    }
    second = client_for("admin").post(f"/held/{held.id}/approve/", headers=accept)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "already_decided"


@pytest.mark.parametrize(
    ("persona", "status", "code"), [("reviewer", 403, "forbidden"), ("outsider", 404, "not_found")]
)
def test_json_clients_get_a_refusal_as_json(client_for, held, persona, status, code):
    """A reviewer's or another site's decision got Django's HTML error page, which a JSON
    client cannot read; the refund stays held either way."""
    answer = client_for(persona).post(
        f"/held/{held.id}/approve/", headers={"Accept": "application/json"}
    )
    assert answer.status_code == status
    assert answer["Content-Type"] == "application/json"
    assert answer.json()["error"]["code"] == code
    assert status_of(held) == "held"


@pytest.mark.parametrize(
    ("amount_minor", "currency", "said"),
    [
        (8900, "USD", "$89.00"),
        # A dispute whose amount the rail gave in a form Sill cannot read.
        (None, "", "amount not known"),
    ],
    ids=["amount", "amount-not-known"],
)
def test_the_panel_explains_a_refused_approval(
    client_for, held, original, amount_minor, currency, said
):
    Dispute.objects.create(
        charge=Charge.objects.get(order=original),
        reason="product_not_received",
        amount_minor=amount_minor,
        currency=currency,
        status="needs_response",
        opened_at=timezone.now(),
    )
    response = client_for("admin").post(
        f"/held/{held.id}/approve/",
        {"confirmed": "1"},
        headers={"HX-Request": "true", "HX-Target": "decision-panel"},
    )
    assert response.status_code == 409
    body = response.content.decode()
    # The rail's reason code in words, as the page shows it.
    assert f"The buyer opened a dispute on this charge (product not received, {said})" in body
    assert "Refused on approval: the charge is disputed" in body
    assert 'id="held-count" hx-swap-oob="true" hidden>0<' in body
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    page = client_for("admin").get(f"/held/{held.id}/").content.decode()
    assert f"Dispute · Product not received · {said} · Needs response" in page


def test_an_expired_approval_is_explained_without_javascript(client_for, held, time_machine):
    time_machine.move_to(held.expires_at + timedelta(minutes=2), tick=False)
    response = client_for("admin").post(
        f"/held/{held.id}/approve/", {"confirmed": "1"}, follow=True
    )
    body = response.content.decode()
    assert "This refund expired at" in body and "Nothing was refunded." in body
    assert status_of(held) == "expired"


# --- the detail page ----------------------------------------------------------------------


def test_the_detail_shows_the_original_order_and_the_record(client_for, held, original):
    body = client_for("reviewer").get(f"/held/{held.id}/").content.decode()
    assert HEADLINE in body
    assert f"Original order #{original.number}" in body
    assert "Settled total" in body and "$89.00" in body
    assert "Buyer" in body and "buyer@example.com" in body
    # The facts as words, the raw ones folded away under their vocabulary labels.
    assert "100% of the order · paid yesterday · earlier refunds unknown" in body
    assert "the agent placed the order" in body
    assert "<summary>The facts as recorded</summary>" in body
    assert "Customer&#x27;s Sill refunds (30 days)" in body
    assert "None: this is the first refund asked for on this order." in body
    assert "Escalated (held for review)" in body
    assert held.decision_hash[:16] in body
    assert f'data-countdown="{held.expires_at.isoformat()}"' in body
    # The reviewer's page has no decision controls.
    assert "/approve/" not in body and "/reject/" not in body and "<textarea" not in body
    assert "an owner or admin approves or rejects them" in body


def test_the_detail_gives_deciders_the_forms(client_for, held):
    body = client_for("owner").get(f"/held/{held.id}/").content.decode()
    assert "Approve and refund $89.00" in body
    assert f'action="/held/{held.id}/reject/"' in body and "hx-confirm=" not in body
    # One confirmation before money moves, naming amount, buyer and rail (sill.js's dialog).
    assert (
        'data-confirm="Refund $89.00 to Buyer (buyer@example.com) on Mock? The money goes back'
        in body
    )
    assert 'data-confirm-button="Approve and refund $89.00"' in body
    assert 'name="note"' in body


def test_the_detail_after_approval_shows_the_reviewer_and_settlement(
    client_for, held, members, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user, note="ok")
    body = client_for("reviewer").get(f"/held/{held.id}/").content.decode()
    assert "Escalated, then approved" in body and "by <strong>admin@roasters.example" in body
    assert "Settlement" in body and "Refunded" in body
    assert "Approved by" in body and "Approve and refund" not in body


def test_the_detail_lists_prior_refunds_of_the_order(client_for, original, agent, members):
    earlier = hold_refund(order=original, requested_by=members["staff"].user, amount_minor=1000)
    Refund.objects.filter(pk=earlier.pk).update(
        status="rejected", outcome_code="rejected_by_reviewer"
    )
    current = hold_refund(order=original, agent=agent, amount_minor=7900)
    body = client_for("owner").get(f"/held/{current.id}/").content.decode()
    assert "Prior refunds of this order" in body
    assert "staff@roasters.example" in body and "$10.00" in body and "Rejected by a person" in body


@pytest.mark.parametrize(
    ("mode", "url"),
    [
        ("test", "https://dashboard.stripe.com/test/payments/pi_3Test"),
        ("live", "https://dashboard.stripe.com/payments/pi_3Test"),
    ],
)
def test_it_links_the_charge_in_the_stripe_dashboard(
    client_for, make_order, agent, site, mode, url, settings
):
    # A live account's refunds are held only where live money is allowed: elsewhere they are
    # refused when decided (tests/refunds/test_live_rail_at_decision.py).
    settings.SILL_ALLOW_LIVE = mode == "live"
    RailAccount.objects.create(site=site, rail="stripe", mode=mode)
    order = make_order(rail="stripe")
    Charge.objects.filter(order=order).update(provider_payment_id="pi_3Test")
    refund = hold_refund(order=order, agent=agent)
    body = client_for("owner").get(f"/held/{refund.id}/").content.decode()
    assert f'href="{url}"' in body and "View in the Stripe dashboard" in body


def test_it_links_the_charge_in_the_shopify_admin(
    client_for,
    agent,
    site,
    shopify,  # noqa: F811 (fixture)
    shopify_account,  # noqa: F811 (fixture)
):
    # A test order on the loopback development store: a refund whose facts no store answered
    # is refused before it is held (live money and the currency paid in are unknown).
    placed = shopify.add_order()
    sync_orders(site=site)
    order = Order.objects.get(charges__provider_payment_id=str(placed.id))
    refund = hold_refund(order=order, agent=agent)
    body = client_for("owner").get(f"/held/{refund.id}/").content.decode()
    assert f'href="https://{SHOP}/admin/orders/{placed.id}"' in body


def test_the_panel_polls_while_the_approved_refund_executes(client_for, held, members):
    # Approved, with execution not run yet (no on-commit callbacks here): processing.
    approve_refund(refund=held, actor=members["admin"].user)
    client = client_for("owner")
    body = client.get(f"/held/{held.id}/").content.decode()
    assert 'hx-trigger="every 3s"' in body and "Refunding" in body
    panel = client.get(
        f"/held/{held.id}/", headers={"HX-Request": "true", "HX-Target": "decision-panel"}
    ).content.decode()
    assert 'id="decision-panel"' in panel and "<html" not in panel
    assert 'id="refund-status" hx-swap-oob="true"' in panel


def test_the_order_page_charge_says_what_is_held_of_what_is_refundable(client_for, held, original):
    """Seen: the charge card said "Refundable $89.00" while the refund panel beside it said
    nothing more could be refunded: the whole $89.00 was held for review."""
    body = client_for("staff").get(f"/orders/{original.pk}/").content.decode()
    card = body.split('<article class="charge"')[1].split("</article>")[0]
    assert "$89.00 held for review" in " ".join(card.split())


@pytest.mark.parametrize(
    ("first", "said"),
    [
        ("reject", "owner@roasters.example had already rejected this refund in Sill ("),
        (
            "approve",
            "), and Sill refused it (the charge is disputed); nothing was refunded.",
        ),
    ],
)
def test_a_decision_after_another_says_what_the_first_was_in_words(client_for, held, first, said):
    """The second admin read "rejected by owner@… (rejected_by_reviewer)", the outcome's code;
    and an owner's approval that Sill refused (a dispute since) read as the owner's rejection."""
    if first == "approve":
        open_dispute(held)
    client_for("owner").post(f"/held/{held.id}/{first}/", {"confirmed": "1"})
    response = client_for("admin").post(
        f"/held/{held.id}/approve/", {"confirmed": "1"}, follow=True
    )
    body = response.content.decode()
    assert "Nothing changed: owner@roasters.example had already" in body and said in body
    assert "rejected_by_reviewer" not in body and "(disputed)" not in body


def test_an_approval_refused_because_the_rail_is_off_says_so(client_for, held, mock_rail):
    """The admin pressed Approve after the rail was switched off: the page said "Outcome: The
    rail is off or not connected" under "Decided by admin@…", as if the admin had rejected it
    for that; a dispute or less left said "Refused on approval", the rail did not (and each
    named the admin who approved as "Decided by")."""
    RailAccount.objects.filter(pk=mock_rail.pk).update(enabled=False)
    response = client_for("admin").post(f"/held/{held.id}/approve/", {"confirmed": "1"})
    assert response.status_code == 302
    body = " ".join(client_for("owner").get(f"/held/{held.id}/").content.decode().split())
    assert "<dt>Outcome</dt><dd>Refused on approval: the rail is off or not connected</dd>" in body
    assert "<dt>Approved by</dt><dd>admin@roasters.example <span" in body
    assert status_of(held) == "rejected"


def test_a_declined_approval_says_why_in_sills_words_then_the_rails(
    client_for, held, members, mock_rail, django_capture_on_commit_callbacks
):
    """Seen: after the rail declined an approved refund, the held page's panel said only the
    rail's message ("Failed: mock rail: the refund was declined (scripted)"), its decision
    record only Sill's label ("Declined by the rail"), and the row's decision message only the
    rail's message again; the refund page and the order page say Sill's words first, then the
    rail's (refunds.labels.outcome_words). The held page now says both, in that order."""
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)
    assert status_of(held) == "failed"
    said = "mock rail: the refund was declined (scripted)"
    client = client_for("owner")
    body = " ".join(client.get(f"/held/{held.id}/").content.decode().split())
    assert f'<dt>Failed</dt><dd>Declined by the rail. <span class="muted">{said}</span></dd>' in (
        body
    )
    record = body.split('<section id="decision-record"', 1)[1].split("</section>", 1)[0]
    settlement = record.split("Settlement", 1)[1].split("</li>", 1)[0]
    assert f"· Declined by the rail. {said}" in settlement
    row = client.get(
        f"/held/{held.id}/", headers={"HX-Request": "true", "HX-Target": f"held-row-{held.id}"}
    ).content.decode()
    assert (
        f'role="status">Approved, but the rail refused the refund: Declined by the rail. {said}.'
        in html.unescape(row)
    )
