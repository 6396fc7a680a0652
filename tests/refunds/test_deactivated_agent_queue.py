"""What deactivating an agent means for its refunds already decided and not yet sent.

The owner's expectation: nothing more leaves for a switched-off agent without a person's
decision. A refund its policy approved and queued for the worker is therefore not sent once
the agent is deactivated: the worker fails it ``agent_deactivated`` (nothing reached the
rail, its reservation is released). A held refund still waits for a person: approving it is
that person's decision, and it is paid.
"""

from __future__ import annotations

import pytest

from refunds.models import Refund, RefundStatus
from refunds.quote import charged_charge
from refunds.review.decisions import approve_refund
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import ORIGINAL, post, refund_intent, switch_agent
from tests.refunds.test_customer_credits import (  # noqa: F401 (fixtures)
    cora,
    credit_intent,
    stripe_rail,
    stub,
)

pytestmark = pytest.mark.django_db


def test_a_queued_refund_of_an_agent_deactivated_since_is_not_sent(
    client, sign, original, agent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        answer = post(client, sign(refund_intent(ORIGINAL)))
    assert answer.json()["decision"] == "approved", answer.content
    switch_agent(agent, active=False)

    with django_capture_on_commit_callbacks(execute=True):
        for run in queued:  # the worker picks it up now
            run()

    refund = Refund.objects.get(pk=answer.json()["refund_id"])
    assert (refund.status, refund.outcome_code) == (RefundStatus.FAILED, "agent_deactivated")
    assert "agent_test_shopper was deactivated" in refund.failure_message
    assert refund.rail_attempted_at is None
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()
    assert charged_charge(original).amount_reserved_minor == 0


@pytest.mark.usefixtures("stripe_rail", "cora")
def test_a_queued_credit_of_an_agent_deactivated_since_is_not_sent(
    client,
    sign,
    agent,
    stub,  # noqa: F811 (a fixture)
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks() as queued:
        answer = post(client, sign(credit_intent()))
    assert answer.json()["decision"] == "approved", answer.content
    switch_agent(agent, active=False)

    with django_capture_on_commit_callbacks(execute=True):
        for run in queued:
            run()

    credit = Refund.objects.get(pk=answer.json()["refund_id"])
    assert (credit.status, credit.outcome_code) == (RefundStatus.FAILED, "agent_deactivated")
    assert "before this credit was sent" in credit.failure_message
    assert not stub.posts()


def test_a_held_refund_a_person_approves_after_the_deactivation_is_paid(
    held, agent, members, django_capture_on_commit_callbacks
):
    switch_agent(agent, active=False)

    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)

    held.refresh_from_db()
    assert held.status == RefundStatus.SUCCEEDED
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_the_held_pages_tell_the_reviewer_the_agent_is_deactivated(held, agent, client_for):
    reviewer = client_for("reviewer")
    for page in ("/held/", f"/held/{held.pk}/"):
        assert "deactivated" not in reviewer.get(page).content.decode()
    switch_agent(agent, active=False)

    listed = reviewer.get("/held/").content.decode()
    detail = reviewer.get(f"/held/{held.pk}/").content.decode()

    assert "agent_test_shopper</code> · <strong>deactivated</strong>" in listed
    assert "deactivated since it asked: approving still pays it" in detail
