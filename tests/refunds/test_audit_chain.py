"""The records the refund pipeline writes form a chain that `audit verify` accepts."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client

from audit.models import AuditRecord
from tests.refunds.conftest import post, refund_intent

pytestmark = pytest.mark.django_db


def test_it_verifies_the_chain_the_pipeline_wrote(
    make_order, agent, sign, mock_rail, django_capture_on_commit_callbacks
):
    for i in range(3):
        original = f"mnd_01K6HXAVBQ8G8PYZKN9JXJEP{i:02d}"
        make_order(placed_by_agent=agent, source_mandate_id=original)
        with django_capture_on_commit_callbacks(execute=True):
            post(Client(), sign(refund_intent(original, max_amount=Decimal("5.00"))))
    records = list(AuditRecord.objects.order_by("seq"))
    assert [r.kind for r in records] == ["approved", "settlement"] * 3
    decision, settlement = records[0], records[1]
    assert decision.hash in settlement.payload  # the settlement links to its decision
    out = io.StringIO()
    call_command("audit", "verify", stdout=out)
    assert "6 records OK" in out.getvalue()
