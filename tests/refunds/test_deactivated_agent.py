"""An agent deactivated between its purchase and the refund of it: its mandates and its token
are refused (401), in words that say the agent is deactivated, not that its key or token does
not exist; the purchase it made stands, and once reactivated it refunds what is left."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import Client

from refunds.models import Mandate, Refund
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token
from sill.rails.models import MockLedgerEntry
from tests.refunds.conftest import purchase_intent, refund_intent, switch_agent

pytestmark = pytest.mark.django_db

DEACTIVATED = "agent_test_shopper is deactivated on this site"


@pytest.fixture
def bought(agent, sign, mock_rail, api) -> dict:
    """A purchase the agent made and Sill charged, after which the agent was deactivated."""
    answer = api(sign(purchase_intent()))
    assert answer.status_code == 201, answer.content
    switch_agent(agent, active=False)
    return answer.json()


def test_its_refund_mandate_is_refused_saying_the_agent_is_deactivated(bought, sign, api):
    answer = api(sign(refund_intent(bought["mandate_id"])))

    assert answer.status_code == 401
    error = answer.json()["error"]
    assert error["code"] == "unknown_key"  # the documented code, unchanged
    assert DEACTIVATED in error["message"] and "reactivate" in error["message"]
    assert error["field"] == "signed.agent_id"
    assert not Refund.objects.exists() and not MockLedgerEntry.objects.filter(kind="refund")


def test_a_body_whose_signature_does_not_hold_learns_nothing_of_the_agent(bought, sign, api):
    doc = json.loads(sign(refund_intent(bought["mandate_id"])))
    doc["envelope"]["signature"] = "A" * 86  # not a signature of anything
    answer = api(json.dumps(doc).encode())

    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unknown_key"
    assert "deactivated" not in answer.json()["error"]["message"]


def test_its_token_is_refused_saying_the_agent_is_deactivated(bought, agent):
    # A token it was given while active: a deactivated agent is issued none.
    switch_agent(agent, active=True)
    token = issue_agent_token(
        agent=agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    switch_agent(agent, active=False)
    read = Client().get(
        f"/api/v1/refunds/{bought['mandate_id']}", headers={"Authorization": f"Bearer {token}"}
    )

    assert read.status_code == 401 and read.headers["WWW-Authenticate"] == "Bearer"
    error = read.json()["error"]
    assert error["code"] == "not_authenticated"
    assert DEACTIVATED in error["message"]


def test_reactivated_it_refunds_what_is_left_of_its_purchase(bought, agent, sign, api):
    switch_agent(agent, active=True)
    answer = api(sign(refund_intent(bought["mandate_id"], max_amount=Decimal("100.00"))))

    assert answer.status_code == 201
    assert (answer.json()["decision"], answer.json()["amount"]) == ("approved", "89.00")
    assert Mandate.objects.filter(action="request_refund").count() == 1
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
