"""An owner switches an agent off (or revokes its key) while one of its mandates is in flight:
Sill has read the key and the agent as active, and waits for Stripe's facts about the charge.
Once the owner is told "deactivated" (or "revoked"), that mandate must not be decided and paid:
it is refused as a deactivated agent's (a revoked key's) mandate is at intake, and nothing of it
is stored.

A loopback Stripe answers the facts; while it answers the charge read, the owner acts in
another connection (the real service, committed), exactly between Sill's key read and its
decision's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from refunds.models import Mandate, Refund
from sill.accounts.models import AgentKey
from sill.accounts.services import revoke_agent_key
from sill.rails.models import RailAccount
from tests.conftest import site_owner
from tests.rails import stripe_facts_stub
from tests.rails.loopback import keepalive_server
from tests.refunds.conftest import ORIGINAL, post, refund_intent, switch_agent
from tests.refunds.test_customer_credits import (  # noqa: F401  (fixtures)
    cora,
    credit_intent,
    stripe_rail,
    stub,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _act_once(during: list[Callable[[], None]]) -> None:
    """Run what the test put in ``during`` (once), from the stub's server thread."""
    if during:
        try:
            during.pop()()
        finally:
            connection.close()  # this server thread's own connection


class _ActsWhileReading(stripe_facts_stub.Handler):
    """The facts stub, running ``during`` (once) while it answers the charge read."""

    during: list[Callable[[], None]]

    def do_GET(self) -> None:
        if self.path.startswith("/v1/charges/"):
            _act_once(self.during)
        super().do_GET()


@pytest.fixture
def stripe_facts(site) -> Iterator[list[Callable[[], None]]]:
    """The site's Stripe rail, answered by the stub; append what happens during the read."""
    during: list[Callable[[], None]] = []
    facts = stripe_facts_stub.StripeFactsStub()
    with keepalive_server(_ActsWhileReading, stub=facts, during=during) as server:
        account = RailAccount(site=site, rail="stripe", enabled=True, api_base=server.url)
        account.set_secret(stripe_facts_stub.KEY)
        account.save()
        yield during


def _ask(make_order, agent, sign) -> Any:
    make_order(rail="stripe", placed_by_agent=agent, source_mandate_id=ORIGINAL)
    return post(Client(), sign(refund_intent(ORIGINAL, max_amount=Decimal("10.00"))))


def test_an_agent_deactivated_while_its_facts_are_read_is_refused(
    stripe_facts, make_order, agent, sign
):
    stripe_facts.append(lambda: switch_agent(agent, active=False))
    answer = _ask(make_order, agent, sign)

    assert not stripe_facts, "Stripe was never asked"
    _assert_refused_as_deactivated(answer)


def _assert_refused_as_deactivated(answer: Any) -> None:
    assert answer.status_code == 401, answer.content
    error = answer.json()["error"]
    assert error["code"] == "unknown_key" and error["field"] == "signed.agent_id"
    assert "agent_test_shopper is deactivated on this site" in error["message"]
    assert not Refund.objects.exists() and not Mandate.objects.exists()


@pytest.mark.usefixtures("stripe_rail", "cora")
def test_an_agent_deactivated_while_its_credits_customer_is_read_is_refused(
    stub,  # noqa: F811 (a fixture)
    agent,
    sign,
):
    read = stub.answer
    during = [lambda: switch_agent(agent, active=False)]

    def answer(method: str, path: str, *args: Any) -> Any:
        if method == "GET":  # the customer's read (a credit's POST comes after the decision)
            _act_once(during)
        return read(method, path, *args)

    stub.answer = answer  # type: ignore[method-assign]
    response = post(Client(), sign(credit_intent()))

    assert not during, "Stripe was never asked"
    _assert_refused_as_deactivated(response)
    assert not stub.posts()


def test_a_key_revoked_while_its_facts_are_read_is_refused(
    stripe_facts, make_order, agent, agent_key, sign
):
    def revoke() -> None:
        key = AgentKey.objects.select_related("agent__site").get(pk=agent_key.pk)
        revoke_agent_key(key=key, actor=site_owner(key.agent.site))

    stripe_facts.append(revoke)
    answer = _ask(make_order, agent, sign)

    assert not stripe_facts, "Stripe was never asked"
    assert answer.status_code == 401, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("unknown_key", "envelope.key_id")
    assert error["message"] == "This key has been revoked."
    assert not Refund.objects.exists() and not Mandate.objects.exists()


def test_one_still_active_after_the_read_is_decided(stripe_facts, make_order, agent, sign):
    answer = _ask(make_order, agent, sign)

    assert answer.status_code == 201, answer.content
    assert answer.json()["decision"] == "approved"
