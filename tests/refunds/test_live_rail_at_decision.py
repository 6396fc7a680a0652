"""A rail account in live mode on a deployment that does not allow live money
(``SILL_ALLOW_LIVE`` off) is refused when a refund is decided, in the words execution would
refuse it with (``rail_disabled``), not answered as on its way and failed a moment later."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.review.decisions import DecisionRefused, approve_refund
from refunds.staff.services import create_staff_refund
from sill.errors import SillError
from sill.rails.models import RailAccount, RailMode
from tests.refunds.conftest import ORIGINAL, hold_refund, post, refund_intent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("live_money_off")]

LIVE_WORDS = (
    "The Stripe rail is in live mode, and live money is switched off on this deployment "
    "(whoever runs Sill can allow it with SILL_ALLOW_LIVE=1)."
)


@pytest.fixture
def live_money_off():
    with override_settings(SILL_ALLOW_LIVE=False):
        yield


@pytest.fixture
def live_stripe(site) -> RailAccount:
    account = RailAccount(site=site, rail="stripe", enabled=True, mode=RailMode.LIVE)
    account.set_secret("sk_live_51LiveDecisionKey000000000000000XYZ9")
    account.save()
    return account


@pytest.fixture
def reason(site) -> RefundReason:
    ensure_default_reasons(site)
    return RefundReason.objects.get(site=site, code="defective")


def test_an_agents_mandate_is_answered_rejected_rail_disabled(
    agent, make_order, live_stripe, sign, django_capture_on_commit_callbacks
):
    make_order(rail="stripe", placed_by_agent=agent, source_mandate_id=ORIGINAL)

    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), sign(refund_intent(ORIGINAL)))

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["decision"], body["status"], body["reason"]) == (
        "rejected",
        "rejected",
        "rail_disabled",
    )
    assert Refund.objects.get(pk=body["refund_id"]).outcome_code == "rail_disabled"


def test_a_staff_refund_is_refused_in_executions_words(
    site, members, make_order, live_stripe, reason
):
    order = make_order(rail="stripe")

    with pytest.raises(SillError) as refused:
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=reason
        )

    assert (refused.value.code, refused.value.message) == ("rail_disabled", LIVE_WORDS)
    assert not Refund.objects.filter(order=order).exists()


def test_approving_a_refund_held_before_the_switch_to_live_closes_it(
    site, members, make_order, reason, django_capture_on_commit_callbacks
):
    account = RailAccount(site=site, rail="stripe", enabled=True, mode=RailMode.TEST)
    account.set_secret("sk_test_51HeldBeforeLive0000000000000000XYZ9")
    account.save()
    held = hold_refund(
        order=make_order(rail="stripe"), requested_by=members["staff"].user, reason_code="defective"
    )
    account.mode = RailMode.LIVE
    account.save()

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(DecisionRefused) as refused,
    ):
        approve_refund(refund=held, actor=members["owner"].user)

    assert (refused.value.code, refused.value.message) == ("rail_disabled", LIVE_WORDS)
    held.refresh_from_db()
    assert (held.status, held.outcome_code) == ("rejected", "rail_disabled")


def test_the_order_page_says_so_instead_of_offering_the_form(client_for, make_order, live_stripe):
    order = make_order(rail="stripe")

    body = client_for("owner").get(f"/orders/{order.id}/").content.decode()

    assert "live money is switched off on this deployment" in body
