"""How many statements one agent decision costs (a regression guard: issue 18 wants a handful;
a change that adds one must say why here).

Every statement counts, SAVEPOINTs included. The test's own transaction turns the decision's
BEGIN/COMMIT into a SAVEPOINT/RELEASE pair, and adds one more pair around the mock rail's
fact read (``policies.facts._read_rail`` takes a savepoint only inside a transaction; the
request runs it in autocommit): so each count here is the production one plus 2
(``bench/decision_profile.py`` prints the production statements). Each test decides once
first, on another order: a site's first append creates its chain head, the first signing
loads the audit keys, a policy version is compiled once; the counts are the steady state.

An approved decision in production on PostgreSQL, 8: before the transaction the key (with
its agent, its site, the site's active policy version, the resend check and the original's
charge with its order and rail account), the mock rail's facts (the charge and its disputes);
then BEGIN, the mandate INSERT, the order and its charge locked with the quote's disputes and
refunds, the agent's refunds today and whether the agent is still active and its key unrevoked
(one statement, ``refunds.quote.locked_order_and_charge`` carrying
``policies.facts.agent_live_totals_select`` and ``refunds.agent.intake._standing_select``), the
chain head read, the append (the head UPDATE, its lock taken last, with the record and
tree INSERTs, the refund INSERT carrying the record's hash and the reservation UPDATE, all in
one statement), COMMIT. SQLite has no data-modifying WITH and sends the append's writes one by
one, nor ``LATERAL``: it reads the order, the charge and the agent's sum in three. It was 35
before issue 18, 18 before the hand-written reads (``sill.sql``), 14 before the policy version
came with the key and the refund and its reservation with the append, 11 before the order,
its charge and the agent's sum came in one statement, 9 before the original's charge came
with the key.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from nacl.signing import SigningKey

from tests.refunds.conftest import ORIGINAL, post, refund_intent, require_approval

pytestmark = pytest.mark.django_db

# The audit append is one statement on PostgreSQL, three on SQLite (no data-modifying CTEs).
# The audit append, with the decision's refund INSERT (and an approval's reservation UPDATE)
# that go with it, is one statement on PostgreSQL; SQLite (no data-modifying WITH) sends the
# head UPDATE, the record and tree INSERTs and the refund INSERT each on its own (+3), and
# the reservation too (+1).
APPEND = 0 if connection.vendor == "postgresql" else 3
RESERVATION = 0 if connection.vendor == "postgresql" else 1
# The order, its charge and the agent's refunds today: one statement on PostgreSQL; SQLite
# (no LATERAL) reads the order and the charge in two (+1), and the agent's sum, for the
# policy's facts, in a third (+1).
SPLIT = 0 if connection.vendor == "postgresql" else 1
TOTALS = 0 if connection.vendor == "postgresql" else 1
# Whether the agent is still active and its key unrevoked, read in the transaction: with the
# order lock on PostgreSQL; SQLite reads it in a statement of its own (+1).
STANDING = 0 if connection.vendor == "postgresql" else 1
APPROVED_DECISION_QUERIES = 10 + APPEND + RESERVATION + SPLIT + TOTALS + STANDING
# The policy's rule holds it: no reservation.
HELD_DECISION_QUERIES = 10 + APPEND + SPLIT + TOTALS + STANDING
# A second agent refund of the same order: refused by the quote (already_executed) with the
# original's locks, before any reservation or fact.
REJECTED_DECISION_QUERIES = 10 + APPEND + SPLIT + STANDING
# A forged signature: the key (with the resend check), nothing written.
BAD_SIGNATURE_QUERIES = 1


@pytest.fixture
def warm(client, sign, make_order, agent, django_capture_on_commit_callbacks):
    """``warm()``: one decision on another order of the site, so the counted one is not the
    site's first append, first signing or first use of its policy version."""

    def decide() -> str:
        other = make_order(
            total="10.00", placed_by_agent=agent, source_mandate_id="mnd_01K6HXAVBQ8G8PYZKN9JXJEPWW"
        )
        with django_capture_on_commit_callbacks():
            answer = post(client, sign(refund_intent(other.source_mandate_id)))
        assert answer.status_code == 201, answer.content
        return str(answer.json()["decision"])

    return decide


def _statements(client, body, django_capture_on_commit_callbacks):
    with CaptureQueriesContext(connection) as captured, django_capture_on_commit_callbacks():
        answer = post(client, body)
    return answer, [q["sql"] for q in captured]


def test_an_approved_decision_costs_a_known_number_of_queries(
    client, sign, original, warm, django_capture_on_commit_callbacks
):
    assert warm() == "approved"
    answer, statements = _statements(
        client, sign(refund_intent(ORIGINAL)), django_capture_on_commit_callbacks
    )
    assert answer.json()["decision"] == "approved"
    # The receipt reuses the record the decision wrote: no second read of it.
    assert not any(re.search(r"FROM \W?audit_auditrecord", s) for s in statements)
    # One dispute check in the transaction (with the charge), none repeated by the facts.
    assert sum("orders_dispute" in s for s in statements) == 2  # the rail's and Sill's
    assert len(statements) == APPROVED_DECISION_QUERIES, "\n".join(s[:120] for s in statements)


def test_a_held_decision_costs_a_known_number_of_queries(
    client, sign, original, site, warm, django_capture_on_commit_callbacks
):
    require_approval(site, origin="agent")
    assert warm() == "escalated"
    answer, statements = _statements(
        client, sign(refund_intent(ORIGINAL)), django_capture_on_commit_callbacks
    )
    assert answer.json()["decision"] == "escalated"
    assert len(statements) == HELD_DECISION_QUERIES, "\n".join(s[:120] for s in statements)


def test_a_rejected_decision_costs_a_known_number_of_queries(
    client, sign, original, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        assert post(client, sign(refund_intent(ORIGINAL))).json()["decision"] == "approved"
    answer, statements = _statements(
        client, sign(refund_intent(ORIGINAL)), django_capture_on_commit_callbacks
    )
    assert (answer.json()["decision"], answer.json()["reason"]) == ("rejected", "already_executed")
    assert len(statements) == REJECTED_DECISION_QUERIES, "\n".join(s[:120] for s in statements)


def test_a_bad_signature_costs_a_known_number_of_queries(
    client, sign, original, warm, django_capture_on_commit_callbacks
):
    warm()
    forged = sign(refund_intent(ORIGINAL), key=SigningKey(bytes(32)))
    answer, statements = _statements(client, forged, django_capture_on_commit_callbacks)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "bad_signature"
    assert len(statements) == BAD_SIGNATURE_QUERIES, "\n".join(s[:120] for s in statements)
