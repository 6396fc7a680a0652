"""How many queries one approved agent decision costs (a regression guard: issue 18 wants
fewer; a change that adds one must say why here)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.refunds.conftest import ORIGINAL, post, refund_intent

pytestmark = pytest.mark.django_db

APPROVED_DECISION_QUERIES = 35


def test_an_approved_decision_costs_a_known_number_of_queries(
    client, sign, original, django_capture_on_commit_callbacks
):
    body = sign(refund_intent(ORIGINAL))
    with CaptureQueriesContext(connection) as captured, django_capture_on_commit_callbacks():
        answer = post(client, body)
    assert answer.json()["decision"] == "approved"
    statements = [q["sql"] for q in captured if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    # The receipt reuses the record the decision wrote: no second read of it.
    assert sum('FROM "audit_auditrecord"' in s for s in statements) == 0
    assert len(statements) <= APPROVED_DECISION_QUERIES, "\n".join(s[:120] for s in statements)
