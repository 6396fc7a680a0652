"""The agent reads its held refund through GET /api/v1/refunds/{mandate_id} as it moves on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from refunds.review.decisions import approve_refund, reject_refund
from refunds.tasks import expire_held_refunds_task
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token
from tests.conftest import site_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def read(agent):
    token = issue_agent_token(
        agent=agent, actor=site_owner(agent.site), second_factor=two_factor.OPERATOR
    )

    def get(refund):
        response = Client().get(
            f"/api/v1/refunds/{refund.mandate.mandate_id}",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.content
        return response.json()

    return get


def test_it_follows_held_to_succeeded(held, read, members, django_capture_on_commit_callbacks):
    before = read(held)
    assert (before["decision"], before["status"], before["reason"]) == ("escalated", "held", None)
    assert before["amount"] == "89.00" and before["expires_at"].endswith("Z")
    assert before["rules"] == [{"id": "r07", "action": "require_approval", "mode": "enforced"}]
    with django_capture_on_commit_callbacks(execute=True):
        approve_refund(refund=held, actor=members["admin"].user)
    after = read(held)
    assert (after["decision"], after["status"], after["reason"]) == ("approved", "succeeded", None)
    assert after["refund_id"] == before["refund_id"]


def test_it_follows_held_to_rejected(held, read, members):
    reject_refund(refund=held, actor=members["owner"].user)
    after = read(held)
    assert (after["decision"], after["status"], after["reason"]) == (
        "rejected",
        "rejected",
        "rejected_by_reviewer",
    )


def test_it_follows_held_to_expired(held, read, time_machine):
    time_machine.move_to(held.expires_at + timedelta(minutes=1), tick=False)
    expire_held_refunds_task.apply()
    after = read(held)
    assert (after["decision"], after["status"], after["reason"]) == (
        "rejected",
        "expired",
        "expired",
    )
