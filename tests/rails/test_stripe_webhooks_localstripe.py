"""Stripe webhooks against localstripe, through the real SDK.

localstripe sends no webhooks: each test reads the objects back from localstripe and signs
the event itself with Stripe's documented scheme (tests/rails/stripe_events.py).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from celery.exceptions import Retry
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import ReconciliationItem, Refund
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.staff.services import NotRefundable, create_staff_refund
from refunds.tasks import catch_up_charge_task
from sill.orders.models import ExternalRefund, Order
from sill.rails.models import RailAccount, WebhookEvent
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import process_event
from tests.conftest import site_owner
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import dispute_obj, event, post_event
from tests.refunds.conftest import ORIGINAL, refund_intent

# The agent fixtures (agent_key, sign, signing_key) come from tests/rails/conftest.py.
pytestmark = pytest.mark.django_db


def test_a_refund_made_at_stripe_is_recorded_and_caps_the_next_agent_refund(
    site, paid, sdk, deliver, api, sign, client_for
):
    outside = sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})
    charge = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
    if not (charge.get("refunds") or {}).get("data"):
        # Stripe's current API versions no longer list refunds on the charge.
        charge["refunds"] = {"object": "list", "data": [as_dict(outside)]}
    body = event("charge.refunded", charge, event_id="evt_charge_refunded")
    assert deliver(site, body).status_code == 200

    paid.refresh_from_db()
    assert paid.amount_refunded_outside_minor == 3000 and paid.remaining.amount_minor == 5900
    page = client_for("staff").get(f"/orders/{paid.order_id}/", {"tab": "transactions"})
    assert outside.id in page.content.decode()

    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert (answer["decision"], answer["amount"]) == ("approved", "59.00"), answer
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded"
    assert sdk.v1.charges.retrieve(paid.provider_charge_id).amount_refunded == 8900
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (5900, 3000)
    assert Order.objects.get(pk=paid.order_id).status == "REFUNDED"

    # Sill's own refund, reported without its metadata, is recognised by its provider id.
    own = {**as_dict(sdk.v1.refunds.retrieve(refund.provider_refund_id)), "metadata": {}}
    assert deliver(site, event("refund.created", own, event_id="evt_own")).status_code == 200
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (5900, 3000)
    assert list(ExternalRefund.objects.values_list("provider_refund_id", flat=True)) == [outside.id]


def test_a_reported_dispute_refuses_agent_and_staff_refunds(
    site, paid, deliver, api, sign, members
):
    body = event(
        "charge.dispute.created", dispute_obj(paid.provider_charge_id), event_id="evt_dispute"
    )
    assert deliver(site, body).status_code == 200

    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert (answer["decision"], answer["reason"]) == ("rejected", "disputed"), answer
    ensure_default_reasons(site)
    leaf = add_reason(site=site, actor=site_owner(site), name="Goodwill")
    order = Order.objects.get(pk=paid.order_id)
    with pytest.raises(NotRefundable, match="disputed"):
        create_staff_refund(
            site=site, order=order, actor=members["staff"].user, kind="full", reason=leaf
        )
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)


def test_sills_own_refund_webhook_before_settlement_is_one_refund(
    site, paid, sdk, api, sign, monkeypatch, localstripe_url
):
    """The race: Stripe's refund.created arrives before the worker stores the rail's answer."""
    real_refund = StripeRail.refund
    seen: dict[str, Any] = {}

    def refund_then_webhook(self: StripeRail, request: Any) -> Any:
        result = real_refund(self, request)
        refund = as_dict(sdk.v1.refunds.retrieve(result.provider_refund_id))
        body = event("refund.created", refund, event_id="evt_own_refund")
        response = post_event(site, body)
        assert response.status_code == 200
        seen["status"] = Refund.objects.get(pk=request.refund_id).status
        seen["outcome"] = process_event(WebhookEvent.objects.get().pk)
        return result

    monkeypatch.setattr(StripeRail, "refund", refund_then_webhook)
    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert answer["decision"] == "approved", answer

    assert seen["status"] == "processing"  # the webhook was processed before settlement
    assert "Sill's own refund" in seen["outcome"]
    assert not ExternalRefund.objects.exists()
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (8900, 0)
    assert Refund.objects.get().status == "succeeded"
    assert sdk.v1.charges.retrieve(paid.provider_charge_id).amount_refunded == 8900
    assert WebhookEvent.objects.get().processed_at is not None
    assert timezone.now() >= WebhookEvent.objects.get().received_at


def test_a_dispute_reported_while_a_refund_is_held_refuses_its_approval(
    site, paid, deliver, api, sign, client_for
):
    from tests.refunds.conftest import require_approval

    require_approval(site, origin="agent")
    answer = api(sign(refund_intent(ORIGINAL))).json()
    assert answer["status"] == "held", answer
    body = event(
        "charge.dispute.created", dispute_obj(paid.provider_charge_id), event_id="evt_dispute"
    )
    assert deliver(site, body).status_code == 200

    response = client_for("owner").post(f"/held/{answer['refund_id']}/approve/", {"confirmed": "1"})
    assert response.status_code in (200, 302, 409)
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("rejected", "disputed")
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)


@pytest.mark.parametrize("api_version", ["2023-10-16", None])
def test_a_refund_made_at_stripe_whose_charge_refunded_lists_no_refunds_is_read_from_stripe(
    site, paid, sdk, deliver, members, api_version
):
    """Endpoints on API versions from 2022-11-15 to before 2024-10-28 get ``charge.refunded``
    without the charge's refunds, and no ``refund.created`` for a charge's refund. It was
    settled as "its refund.* events carry them", which never came: the refund made in the
    dashboard was not recorded, the order still showed the money as refundable, and nobody was
    told, until a reconciliation run or a refund decision happened to read the charge."""
    outside = sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})
    charge = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
    charge.pop("refunds", None)
    assert charge["amount_refunded"] == 3000
    versioned = {"api_version": api_version} if api_version else {}
    body = event("charge.refunded", charge, event_id="evt_no_list", **versioned)
    assert deliver(site, body).status_code == 200

    paid.refresh_from_db()
    assert (paid.amount_refunded_outside_minor, paid.remaining.amount_minor) == (3000, 5900)
    [row] = ExternalRefund.objects.filter(charge=paid)
    assert (row.provider_refund_id, row.counted_minor) == (outside.id, 3000)
    # The merchant sees the missed refund in the Reconciliation inbox, already corrected.
    [item] = ReconciliationItem.objects.filter(charge=paid)
    assert item.key == f"missing_in_sill:{outside.id}"
    assert AuditRecord.objects.filter(kind="external_refund").count() == 1

    # The same refund reported again, by event or as the charge's, is not counted twice.
    again = event("refund.created", as_dict(outside), event_id="evt_late_created")
    assert deliver(site, again).status_code == 200
    body = event("charge.refunded", charge, event_id="evt_no_list_2", **versioned)
    assert deliver(site, body).status_code == 200
    paid.refresh_from_db()
    assert paid.amount_refunded_outside_minor == 3000
    assert ExternalRefund.objects.filter(charge=paid).count() == 1
    assert ReconciliationItem.objects.filter(charge=paid).count() == 1


def test_a_charge_refunded_without_refunds_that_sill_already_counts_reads_nothing(
    site, paid, sdk, deliver, settings
):
    """Sill's books already hold what Stripe counts refunded (here: nothing more): the event
    asks Stripe nothing."""
    charge = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
    charge.pop("refunds", None)
    deliver(site, event("charge.refunded", charge, event_id="evt_nothing_new"))
    stored = WebhookEvent.objects.get(event_id="evt_nothing_new")
    assert "no refunds listed" in stored.outcome and not ExternalRefund.objects.exists()


def test_a_charge_refunded_without_refunds_on_a_version_that_sends_refund_events_reads_nothing(
    site, paid, sdk, deliver
):
    """From 2024-10-28 Stripe sends each refund's ``refund.created`` too: the charge is not
    read (its refund's own event, which may be processed just after, records it; reading the
    charge first would show it in the inbox as a missed webhook)."""
    sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})
    charge = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
    charge.pop("refunds", None)
    body = event("charge.refunded", charge, event_id="evt_new", api_version="2024-10-28.acacia")
    deliver(site, body)
    stored = WebhookEvent.objects.get(event_id="evt_new")
    assert stored.outcome.endswith("its refund.* events carry them"), stored.outcome
    assert not ExternalRefund.objects.exists()
    assert not ReconciliationItem.objects.exists()


def test_a_catch_up_stripe_does_not_answer_is_retried_not_dropped(
    site, paid, sdk, deliver, localstripe_url
):
    """The event is settled once its catch-up is sent; a catch-up that cannot reach Stripe
    was answered "left to the next reconciliation run", which never reads a charge older than
    its window that Sill has not touched: the refund stayed unrecorded. It is retried."""
    outside = sdk.v1.refunds.create(params={"charge": paid.provider_charge_id, "amount": 3000})
    charge = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
    charge.pop("refunds", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    RailAccount.objects.filter(site=site, rail="stripe").update(api_base=nowhere)
    with pytest.raises(Retry):  # the task's autoretry on Stripe not answering
        deliver(site, event("charge.refunded", charge, event_id="evt_unreachable"))
    assert WebhookEvent.objects.get(event_id="evt_unreachable").processed_at is not None
    assert not ExternalRefund.objects.exists()

    RailAccount.objects.filter(site=site, rail="stripe").update(api_base=localstripe_url)
    catch_up_charge_task.run(paid.pk, "evt_unreachable")  # the retry
    assert ExternalRefund.objects.get(charge=paid).provider_refund_id == outside.id
    paid.refresh_from_db()
    assert paid.remaining.amount_minor == 5900
