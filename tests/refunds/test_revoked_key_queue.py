"""What revoking an agent's key means for the refunds it signed that are decided and not sent.

The security lead's expectation: a revoked key is one the merchant no longer trusts, so a
refund its policy approved under that key and queued for the worker is not sent: the worker
fails it ``key_revoked`` (nothing reached the rail, its reservation is released, the
settlement record says why). One that may already be at the rail (an attempt timed out) is
the rail's to answer: it is never failed while the rail may hold it. A held refund still
waits for a person, and the held pages say its key was revoked.
"""

from __future__ import annotations

import json

import pytest

from audit.models import AuditRecord
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundStatus
from refunds.quote import charged_charge
from refunds.review.decisions import approve_refund
from sill.accounts.models import AgentKey
from sill.accounts.services import revoke_agent_key
from sill.rails.models import MockLedgerEntry
from tests.conftest import site_owner
from tests.refunds.conftest import ORIGINAL, post, refund_intent
from tests.refunds.test_customer_credits import (  # noqa: F401 (fixtures)
    cora,
    credit_intent,
    stripe_rail,
    stub,
)

pytestmark = pytest.mark.django_db


def revoke(key: AgentKey) -> None:
    """The site's owner revokes ``key`` on Settings → Agents."""
    fresh = AgentKey.objects.select_related("agent__site").get(pk=key.pk)
    revoke_agent_key(key=fresh, actor=site_owner(fresh.agent.site))


def test_a_queued_refund_signed_with_a_key_revoked_since_is_not_sent(
    client, sign, original, agent_key, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        answer = post(client, sign(refund_intent(ORIGINAL)))
    assert answer.json()["decision"] == "approved", answer.content
    revoke(agent_key)

    with django_capture_on_commit_callbacks(execute=True):
        for run in queued:  # the worker picks it up now
            run()

    refund = Refund.objects.get(pk=answer.json()["refund_id"])
    assert (refund.status, refund.outcome_code) == (RefundStatus.FAILED, "key_revoked")
    assert f"key {agent_key.key_id} of agent_test_shopper was revoked" in refund.failure_message
    assert refund.rail_attempted_at is None
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()
    assert charged_charge(original).amount_reserved_minor == 0
    settlement = AuditRecord.objects.get(subject_refund_id=refund.pk, kind="settlement")
    body = json.loads(settlement.payload)["body"]
    assert (body["outcome"], body["reason"]) == ("failed", "key_revoked")


@pytest.mark.usefixtures("stripe_rail", "cora")
def test_a_queued_credit_signed_with_a_key_revoked_since_is_not_sent(
    client,
    sign,
    agent_key,
    stub,  # noqa: F811 (a fixture)
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks() as queued:
        answer = post(client, sign(credit_intent()))
    assert answer.json()["decision"] == "approved", answer.content
    revoke(agent_key)

    with django_capture_on_commit_callbacks(execute=True):
        for run in queued:
            run()

    credit = Refund.objects.get(pk=answer.json()["refund_id"])
    assert (credit.status, credit.outcome_code) == (RefundStatus.FAILED, "key_revoked")
    assert "before this credit was sent" in credit.failure_message
    assert not stub.posts()


def test_a_refund_that_may_be_at_the_rail_is_left_to_the_rails_answer(
    client, sign, original, agent_key, mock_rail, django_capture_on_commit_callbacks
):
    mock_rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=False):
        answer = post(client, sign(refund_intent(ORIGINAL)))
    refund_id = answer.json()["refund_id"]
    with pytest.raises(RetryLater):
        execute_refund(refund_id)  # the rail made it; its answer was lost
    revoke(agent_key)

    assert execute_refund(refund_id) == "succeeded"  # the lookup finds it: it stands

    refund = Refund.objects.get(pk=refund_id)
    assert (refund.status, refund.outcome_code) == (RefundStatus.SUCCEEDED, "")
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_refund_that_never_reached_the_rail_is_not_sent_on_the_retry(
    client, sign, original, agent_key, mock_rail, django_capture_on_commit_callbacks
):
    mock_rail.config = {"refund": "timeout", "fail_times": 1}  # timed out before it acted
    mock_rail.save()
    with django_capture_on_commit_callbacks(execute=False):
        answer = post(client, sign(refund_intent(ORIGINAL)))
    refund_id = answer.json()["refund_id"]
    with pytest.raises(RetryLater):
        execute_refund(refund_id)
    revoke(agent_key)

    # The lookup says the rail holds no refund under the key: safe to fail, and not sent now.
    assert execute_refund(refund_id) == "failed"

    refund = Refund.objects.get(pk=refund_id)
    assert (refund.status, refund.outcome_code) == (RefundStatus.FAILED, "key_revoked")
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()
    assert charged_charge(original).amount_reserved_minor == 0


def test_a_held_refund_a_person_approves_after_the_revocation_is_paid(
    held, agent_key, members, django_capture_on_commit_callbacks
):
    revoke(agent_key)

    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)

    held.refresh_from_db()
    assert held.status == RefundStatus.SUCCEEDED
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_the_held_pages_tell_the_reviewer_the_key_was_revoked(held, agent_key, client_for):
    reviewer = client_for("reviewer")
    for page in ("/held/", f"/held/{held.pk}/"):
        assert "revoked" not in reviewer.get(page).content.decode()
    revoke(agent_key)

    listed = reviewer.get("/held/").content.decode()
    detail = reviewer.get(f"/held/{held.pk}/").content.decode()

    assert "agent_test_shopper</code> · <strong>key revoked</strong>" in listed
    assert "the key it signed with was revoked since it asked: approving still pays it" in detail
