"""An accepted purchase is a signed ``approved`` decision record, written with its order before
any charge is tried, naming the order and the exact bytes of the agent's mandate; the charge's
own records (charged, declined, needing attention) name that decision by its hash, as a
refund's settlement names its decision."""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditRecord
from audit.selectors import chain_verification
from sill.orders.charging import charge_order
from sill.orders.models import Order
from sill.rails.models import RailAccount
from tests.refunds.conftest import post, purchase_intent

pytestmark = pytest.mark.django_db


def body_of(record: AuditRecord) -> dict[str, Any]:
    return json.loads(record.payload)["body"]


def buy(sign: Callable[..., bytes], capture: Any) -> tuple[bytes, dict[str, Any]]:
    """POST a purchase on the mock rail; its charge task is not run."""
    body = sign(purchase_intent(payment={"rail": "mock", "payment_method": "pm_visa"}))
    with capture(execute=False):
        response = post(Client(), body)
    assert response.status_code == 201, response.json()
    return body, response.json()


def test_it_is_one_approved_record_naming_the_order_and_the_mandate_before_the_charge(
    sign: Callable[..., bytes], mock_rail: RailAccount, django_capture_on_commit_callbacks: Any
) -> None:
    # Seen: an accepted purchase wrote nothing until the worker settled its charge, so the
    # log could not show Sill took the money under this mandate before charging it.
    body, answer = buy(sign, django_capture_on_commit_callbacks)
    assert (answer["decision"], answer["status"]) == ("approved", "processing")

    (decision,) = AuditRecord.objects.filter(site=mock_rail.site)
    written = body_of(decision)
    assert (decision.kind, written["decision"], written["kind"]) == (
        "approved",
        "approved",
        "purchase",
    )
    assert (written["order_id"], written["mandate_id"]) == (
        answer["order_id"],
        answer["mandate_id"],
    )
    assert written["agent_id"] == "agent_test_shopper"
    assert (written["amount_minor"], written["currency"], written["rail"]) == (8900, "USD", "mock")
    assert written["reason"] is None and "refund_id" not in written
    # The exact bytes the agent sent, as a refund's decision binds them.
    assert written["mandate_sha256"] == hashlib.sha256(body).hexdigest()
    assert (decision.subject_order_id, decision.subject_refund_id) == (answer["order_id"], "")
    assert chain_verification(mock_rail.site).ok

    # Sent again: the stored answer, and no second decision.
    assert post(Client(), body).json() == answer
    assert AuditRecord.objects.filter(site=mock_rail.site).count() == 1

    # The charge's record follows and names the decision it carries out.
    assert charge_order(order_id=answer["order_id"]) == "succeeded"
    kinds = AuditRecord.objects.filter(site=mock_rail.site).order_by("seq")
    assert [r.kind for r in kinds] == ["approved", "charge"]
    charged = body_of(kinds[1])
    assert charged["decision_hash"] == decision.hash
    assert (charged["order_id"], charged["mandate_id"], charged["outcome"]) == (
        answer["order_id"],
        answer["mandate_id"],
        "succeeded",
    )
    assert chain_verification(mock_rail.site).ok


def test_a_declined_charge_and_one_needing_attention_name_the_decision_too(
    sign: Callable[..., bytes],
    mock_rail: RailAccount,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # A charge that never settles leaves the decision on the log, and its flag points at it.
    settings.SILL_CHARGE_MAX_ATTEMPTS = 1  # the first attempt without an answer is the last
    _, stuck = buy(sign, django_capture_on_commit_callbacks)
    _, declined = buy(sign, django_capture_on_commit_callbacks)

    mock_rail.config = {"charge": "timeout_after_effect"}
    mock_rail.save()
    assert charge_order(order_id=stuck["order_id"]) == "needs_attention"
    mock_rail.config = {"charge": "decline"}
    mock_rail.save()
    assert charge_order(order_id=declined["order_id"]) == "failed"

    for answer, kind, outcome in (
        (stuck, "needs_attention", "needs_attention"),
        (declined, "charge", "failed"),
    ):
        decision, follows = AuditRecord.objects.filter(
            site=mock_rail.site, subject_order_id=answer["order_id"]
        ).order_by("seq")
        assert decision.kind == "approved" and follows.kind == kind
        assert body_of(follows)["outcome"] == outcome
        assert body_of(follows)["decision_hash"] == decision.hash
    assert chain_verification(mock_rail.site).ok


def test_the_merchant_reads_it_in_words_on_activity_and_in_the_csv(
    sign: Callable[..., bytes],
    mock_rail: RailAccount,
    client_for: Callable[[str], Client],
    django_capture_on_commit_callbacks: Any,
) -> None:
    _, answer = buy(sign, django_capture_on_commit_callbacks)
    order = Order.objects.get(pk=answer["order_id"])
    words = "Purchase approved, to be charged on Mock"
    owner = client_for("owner")

    page = html.unescape(owner.get("/activity/").content.decode())
    row = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert words in row
    assert f'href="/orders/{order.pk}/">#{order.number}</a>' in row
    assert "$89.00" in row and "agent_test_shopper" in row

    export = owner.get("/activity/", {"format": "csv"})
    lines = list(csv.reader(io.StringIO(export.getvalue().decode())))
    assert lines[1][2:] == [
        "Approved",
        "",
        str(order.number),
        "89.00",
        "USD",
        "Test shopper (agent_test_shopper)",  # named, as the page names it
        words,
    ]
