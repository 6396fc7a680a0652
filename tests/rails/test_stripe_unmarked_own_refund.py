"""Sill's own refund reported by Stripe without its marker is counted once, in either order.

Someone edits the refund's metadata in Stripe's dashboard (``sill_refund_id`` removed): its
webhook reads as a refund made outside Sill. Reported before the worker settles it, it was
counted outside Sill *and* settled as Sill's (paid back twice over; a refund of more than
half the charge could not settle at all). Against localstripe through the real SDK; the
events are signed by the test with Stripe's scheme (localstripe sends no webhooks).
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command

from audit import verify_export
from audit.models import AuditRecord
from refunds.models import Refund
from refunds.reconcile.inbox import reconcile_charge
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import process_event
from tests.rails.localstripe_fixtures import KEY, as_dict
from tests.rails.stripe_events import event, post_event
from tests.refunds.conftest import ORIGINAL, refund_intent

pytestmark = pytest.mark.django_db


def unmarked(sdk, provider_refund_id: str, **changes: Any) -> dict[str, Any]:
    """The refund as Stripe holds it, its ``sill_refund_id`` removed in the dashboard."""
    obj = as_dict(sdk.v1.refunds.retrieve(provider_refund_id))
    assert obj["metadata"].get("sill_refund_id")
    obj["metadata"] = {}
    obj.update(changes)
    return obj


def report_before_settlement(
    monkeypatch, site, sdk, *, kind: str = "refund.created", **changes: Any
) -> dict[str, str]:
    """Stripe refunds for the worker, then its unmarked event is applied before the worker
    settles (the worker goes on with Stripe's answer, which names the same refund)."""
    real_refund = StripeRail.refund
    seen: dict[str, str] = {}

    def refund_then_unmarked_webhook(self: StripeRail, request: Any) -> Any:
        result = real_refund(self, request)
        body = event(
            kind, unmarked(sdk, result.provider_refund_id, **changes), event_id="evt_unmarked"
        )
        response = post_event(site, body)
        assert response.status_code == 200
        seen["outcome"] = process_event(WebhookEvent.objects.get(event_id="evt_unmarked").pk)
        seen["status"] = Refund.objects.get(pk=request.refund_id).status
        return result

    monkeypatch.setattr(StripeRail, "refund", refund_then_unmarked_webhook)
    return seen


def audit_bundle(refund: Refund) -> dict[str, Any]:
    out = StringIO()
    call_command("audit", "bundle", "--refund", refund.pk, stdout=out)
    return json.loads(out.getvalue())


def audit_verifies(site) -> bool:
    out = StringIO()
    call_command("audit", "verify", "--site", site.pk, stdout=out)
    return "OK" in out.getvalue()


@pytest.mark.parametrize(("amount", "remaining"), [("20.00", 6900), ("50.00", 3900)])
def test_it_counts_a_refund_reported_unmarked_before_settlement_once(
    site, paid, sdk, api, sign, members, monkeypatch, amount, remaining
):
    seen = report_before_settlement(monkeypatch, site, sdk)
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal(amount)))).json()
    assert answer["decision"] == "approved", answer
    # The webhook did record it as outside Sill: nothing told it otherwise yet.
    assert seen["status"] == "processing", seen

    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", (refund.status, refund.failure_message)
    paid.refresh_from_db()
    assert (
        paid.amount_refunded_minor,
        paid.amount_refunded_outside_minor,
        paid.amount_reserved_minor,
    ) == (refund.amount_minor, 0, 0)
    assert paid.remaining.amount_minor == remaining
    assert Order.objects.get(pk=paid.order_id).status == "PARTIALLY_REFUNDED"
    # Not listed as a refund outside Sill on the order's Transactions tab any more.
    assert not ExternalRefund.objects.exists()

    # The chain says what happened: counted outside, then taken back as Sill's own refund.
    bodies = [
        json.loads(r.payload)["body"]
        for r in AuditRecord.objects.filter(kind="external_refund").order_by("seq")
    ]
    assert [b["counted_minor"] for b in bodies] == [refund.amount_minor, 0]
    assert bodies[1]["refund_id"] == refund.pk
    assert bodies[1]["provider_refund_id"] == refund.provider_refund_id
    assert bodies[1]["uncounted_minor"] == refund.amount_minor
    assert audit_verifies(site)
    # It is about Sill's refund: the refund's evidence bundle lists it (it changed what the
    # charge counts as refunded), and the bundle verifies with it.
    bundle = audit_bundle(refund)
    kinds = [json.loads(r["payload"])["kind"] for r in bundle["records"]]
    assert "external_refund" in kinds, kinds
    assert verify_export.verify_bundle(bundle, None, None)[1] == []


def test_a_refund_reported_unmarked_and_failed_before_settlement_is_reversed(
    site, paid, sdk, api, sign, members, monkeypatch
):
    """Stripe answered the worker "succeeded", then reported the refund failed, unmarked:
    the settlement under that id is reversed at once, never counted as paid back."""
    report_before_settlement(
        monkeypatch,
        site,
        sdk,
        kind="refund.failed",
        status="failed",
        failure_reason="expired_or_canceled_card",
    )
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("20.00")))).json()

    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    paid.refresh_from_db()
    assert (
        paid.amount_refunded_minor,
        paid.amount_refunded_outside_minor,
        paid.amount_reserved_minor,
    ) == (0, 0, 0)
    assert Order.objects.get(pk=paid.order_id).status == "PAID"
    assert not ExternalRefund.objects.exists()
    assert refund.confirmation_sent_at is None
    assert audit_verifies(site)


@pytest.mark.parametrize("kind", ["refund.created", "refund.updated", "charge.refunded"])
def test_a_settled_refund_reported_unmarked_afterwards_is_not_counted_again(
    site, paid, sdk, api, sign, deliver, kind
):
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", answer

    obj = unmarked(sdk, refund.provider_refund_id)
    if kind == "charge.refunded":
        obj = as_dict(sdk.v1.charges.retrieve(paid.provider_charge_id))
        for listed in obj["refunds"]["data"]:
            listed["metadata"] = {}
    assert deliver(site, event(kind, obj, event_id="evt_late")).status_code == 200

    assert not ExternalRefund.objects.exists()
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (5000, 0)
    assert Charge.objects.get(pk=paid.pk).remaining.amount_minor == 3900
    assert not AuditRecord.objects.filter(kind="external_refund").exists()


@pytest.mark.parametrize("kind", ["refund.failed", "charge.refund.updated"])
def test_a_settled_refund_reported_unmarked_and_failed_afterwards_is_reversed(
    site, paid, sdk, api, sign, deliver, members, kind
):
    """The metadata edited in the dashboard, then the refund fails at Stripe (a closed card):
    it was taken for Sill's own refund by its id and left as it was, settled, so the buyer
    was not paid back, the amount was not refundable again, and nobody was told."""
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", answer
    mail.outbox.clear()

    obj = unmarked(
        sdk, refund.provider_refund_id, status="failed", failure_reason="expired_or_canceled_card"
    )
    assert deliver(site, event(kind, obj, event_id="evt_unmarked_failed")).status_code == 200

    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_refunded_outside_minor) == (0, 0)
    assert paid.remaining.amount_minor == 8900
    assert not ExternalRefund.objects.exists()
    body = json.loads(AuditRecord.objects.get(kind="refund_reversed").payload)["body"]
    assert body["source"] == "evt_unmarked_failed"
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    assert audit_verifies(site)


class UnmarkedAndFailed(StripeRail):
    """Stripe as it lists the charge's refunds once ``provider_refund_id`` was unmarked in the
    dashboard and then failed (localstripe neither edits metadata away nor fails refunds)."""

    def __init__(self, *, provider_refund_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.provider_refund_id = provider_refund_id

    def list_refunds(self, provider_charge_id: str, *, provider_payment_id: str = "") -> Any:
        listed = super().list_refunds(provider_charge_id, provider_payment_id=provider_payment_id)
        return [
            replace(r, sill_refund_id="", status="failed", failure_reason="lost_or_stolen_card")
            if r.provider_refund_id == self.provider_refund_id
            else r
            for r in listed
        ]


def test_reconciliation_reverses_a_settled_refund_stripe_lists_unmarked_and_failed(
    site, paid, api, sign, members, localstripe_url, django_capture_on_commit_callbacks
):
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", answer
    mail.outbox.clear()

    rail = UnmarkedAndFailed(
        provider_refund_id=refund.provider_refund_id,
        secret_key=KEY,
        api_base=localstripe_url,
    )
    with django_capture_on_commit_callbacks(execute=True):
        reconcile_charge(charge=paid, rail=rail, event_id="reconcile:unmarked")

    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    assert "lost or stolen card" in refund.failure_message
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.remaining.amount_minor) == (0, 8900)
    assert not ExternalRefund.objects.exists()
    assert len(mail.outbox) == 2
    assert audit_verifies(site)
