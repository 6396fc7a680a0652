"""A refund Sill settled that Stripe later reports failed: reversed, shown, recorded, told.

Against localstripe through the real SDK; the failure event is signed by the test with
Stripe's scheme (localstripe neither fails refunds nor sends webhooks).
"""

from __future__ import annotations

import csv
import io
import json
import socket
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from celery.exceptions import Retry
from django.core import mail
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.attention import check_refund_at_rail
from refunds.staff.services import create_staff_refund
from refunds.tasks import notify_reversed_task
from sill.accounts import two_factor
from sill.accounts.services import issue_agent_token
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.models import WebhookEvent
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import process_event
from tests.conftest import site_owner
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event, post_event
from tests.refunds.conftest import ORIGINAL, refund_intent

pytestmark = pytest.mark.django_db


@pytest.fixture
def settled(paid: Charge, api, sign) -> Refund:
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
    refund = Refund.objects.get(pk=answer["refund_id"])
    assert refund.status == "succeeded", answer
    mail.outbox.clear()
    return refund


def failed_event(sdk, refund: Refund, *, event_id: str = "evt_failed", kind="refund.failed"):
    obj = as_dict(sdk.v1.refunds.retrieve(refund.provider_refund_id))
    assert obj["metadata"]["sill_refund_id"] == refund.pk
    obj.update(status="failed", failure_reason="expired_or_canceled_card")
    return event(kind, obj, event_id=event_id)


def test_it_restores_what_is_refundable_and_shows_the_refund_failed(
    site,
    paid,
    settled,
    sdk,
    deliver,
    client_for,
    members,
):
    assert deliver(site, failed_event(sdk, settled)).status_code == 200

    settled.refresh_from_db()
    assert (settled.status, settled.outcome_code) == ("failed", "failed_after_settlement")
    assert settled.settled_at is not None and settled.reversed_at is not None
    assert "expired or canceled card" in settled.failure_message
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)
    assert paid.remaining.amount_minor == 8900
    assert Order.objects.get(pk=paid.order_id).status == "PAID"
    assert not ExternalRefund.objects.exists()

    page = client_for("staff").get(f"/orders/{paid.order_id}/", {"tab": "transactions"})
    html = page.content.decode()
    assert "Failed after settlement" in html and "the money went back to you" in html


def test_it_writes_a_signed_record_and_tells_owners_and_admins(
    site,
    paid,
    settled,
    sdk,
    deliver,
    members,
):
    deliver(site, failed_event(sdk, settled))

    record = AuditRecord.objects.get(kind="refund_reversed")
    body = json.loads(record.payload)["body"]
    assert (body["refund_id"], body["provider_refund_id"]) == (
        settled.pk,
        settled.provider_refund_id,
    )
    assert body["source"] == "evt_failed" and body["decision_hash"] == settled.decision_hash
    out = StringIO()
    call_command("audit", "verify", "--site", site.pk, stdout=out)
    assert "OK" in out.getvalue()

    # One message each (tests/refunds/test_failure_mail_refused.py), in the same words.
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    for message in mail.outbox:
        assert "failed after settlement" in message.subject.lower()
        assert f"/orders/{paid.order_id}/" in message.body


def test_its_email_is_sent_once_and_again_after_a_mail_server_failure(
    site, paid, settled, sdk, deliver, members, settings
):
    """The task is redelivered (a worker lost after sending) or retried after the mail server
    refused: owners are told once, and told even when the first send failed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port  # nothing listens there
    with pytest.raises(Retry):  # the task's autoretry on the mail server's OSError
        deliver(site, failed_event(sdk, settled))
    settled.refresh_from_db()
    assert settled.reversed_at is not None and mail.outbox == []
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert notify_reversed_task.run(settled.pk) is True  # the task's retry
    assert notify_reversed_task.run(settled.pk) is False  # a redelivery
    assert len(mail.outbox) == 2  # the owner's and the admin's


def test_it_applies_once_however_often_and_in_whatever_form_stripe_reports_it(
    site,
    paid,
    settled,
    sdk,
    deliver,
    members,
):
    deliver(site, failed_event(sdk, settled, event_id="evt_1"))
    deliver(site, failed_event(sdk, settled, event_id="evt_1"))
    deliver(site, failed_event(sdk, settled, event_id="evt_2", kind="refund.updated"))

    assert AuditRecord.objects.filter(kind="refund_reversed").count() == 1
    assert len(mail.outbox) == 2  # once: the owner's and the admin's
    paid.refresh_from_db()
    assert paid.amount_refunded_minor == 0


def test_the_agent_api_answers_failed_with_the_reason(site, paid, settled, sdk, deliver):
    deliver(site, failed_event(sdk, settled))
    token = issue_agent_token(
        agent=settled.agent, actor=site_owner(settled.agent.site), second_factor=two_factor.OPERATOR
    )
    answer = (
        Client()
        .get(
            f"/api/v1/refunds/{settled.mandate.mandate_id}",
            headers={"Authorization": f"Bearer {token}"},
        )
        .json()
    )
    assert (answer["status"], answer["reason"]) == ("failed", "failed_after_settlement")


def test_a_succeeded_report_of_a_settled_refund_changes_nothing(
    site,
    paid,
    settled,
    sdk,
    deliver,
):
    obj = as_dict(sdk.v1.refunds.retrieve(settled.provider_refund_id))
    deliver(site, event("refund.updated", obj, event_id="evt_ok"))
    settled.refresh_from_db()
    assert settled.status == "succeeded"
    assert not AuditRecord.objects.filter(kind="refund_reversed").exists()


def test_a_failure_reported_while_sill_executes_the_refund_is_left_to_the_execution(
    site,
    paid,
    settled,
    sdk,
    deliver,
):
    # As if the webhook overtook the worker: the books wait for the execution, which keeps
    # the report (its settlement under that id reverses the refund at once).
    Refund.objects.filter(pk=settled.pk).update(status="processing")
    deliver(site, failed_event(sdk, settled))
    settled.refresh_from_db()
    assert (settled.status, settled.reversed_at) == ("processing", None)
    assert (settled.failed_at_rail_id, settled.failed_at_rail_source) == (
        settled.provider_refund_id,
        "evt_failed",
    )
    assert not AuditRecord.objects.filter(kind="refund_reversed").exists()


def test_a_failure_reported_before_the_worker_settles_is_not_lost(
    site, paid, sdk, api, sign, members, monkeypatch
):
    """The race: Stripe answers the worker ``succeeded``, then fails the refund (a closed card)
    and its ``refund.failed`` is applied before the worker commits the settlement. The worker
    still holds Stripe's first answer; the failure must not be dropped as "left to the
    execution" while the execution settles the refund as paid back."""
    real_refund = StripeRail.refund
    seen: dict[str, Any] = {}

    def refund_then_failure_webhook(self: StripeRail, request: Any) -> Any:
        result = real_refund(self, request)
        obj = as_dict(sdk.v1.refunds.retrieve(result.provider_refund_id))
        obj.update(status="failed", failure_reason="expired_or_canceled_card")
        body = event("refund.failed", obj, event_id="evt_failed_early")
        response = post_event(site, body)
        assert response.status_code == 200
        seen["status"] = Refund.objects.get(pk=request.refund_id).status
        seen["outcome"] = process_event(WebhookEvent.objects.get(event_id="evt_failed_early").pk)
        return result  # the worker goes on with Stripe's first answer, "succeeded"

    monkeypatch.setattr(StripeRail, "refund", refund_then_failure_webhook)
    answer = api(sign(refund_intent(ORIGINAL, max_amount=Decimal("50.00")))).json()
    assert answer["decision"] == "approved", answer
    assert seen["status"] == "processing", seen

    refund = Refund.objects.get(pk=answer["refund_id"])
    assert (refund.status, refund.outcome_code) == ("failed", "failed_after_settlement")
    assert "expired or canceled card" in refund.failure_message
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)
    assert paid.remaining.amount_minor == 8900
    assert Order.objects.get(pk=paid.order_id).status == "PAID"
    assert not ExternalRefund.objects.exists()
    record = AuditRecord.objects.get(kind="refund_reversed")
    assert json.loads(record.payload)["body"]["source"] == "evt_failed_early"
    # Owners and admins are told; the buyer is sent no confirmation of a refund that failed.
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    assert all("failed after settlement" in m.subject.lower() for m in mail.outbox)
    assert refund.confirmation_sent_at is None
    out = StringIO()
    call_command("audit", "verify", "--site", site.pk, stdout=out)
    assert "OK" in out.getvalue()


def test_a_failure_reported_while_the_refund_needs_attention_is_applied_when_it_settles(
    site, paid, settled, sdk, deliver, members, django_capture_on_commit_callbacks
):
    # As if the worker's answer was lost: the refund needs attention, its $50.00 reserved.
    Refund.objects.filter(pk=settled.pk).update(
        status="needs_attention", settled_at=None, next_check_at=timezone.now()
    )
    Charge.objects.filter(pk=paid.pk).update(amount_refunded_minor=0, amount_reserved_minor=5000)
    deliver(site, failed_event(sdk, settled, event_id="evt_failed_in_doubt"))
    settled.refresh_from_db()
    assert (settled.status, settled.failed_at_rail_id) == (
        "needs_attention",
        settled.provider_refund_id,
    )

    # The beat task asks Stripe (localstripe still says "succeeded"): settled under the id
    # Stripe reported failed, so reversed at once, in the same transaction.
    with django_capture_on_commit_callbacks(execute=True):
        check_refund_at_rail(settled.pk)
    settled.refresh_from_db()
    assert (settled.status, settled.outcome_code) == ("failed", "failed_after_settlement")
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.amount_reserved_minor) == (0, 0)
    assert Order.objects.get(pk=paid.order_id).status == "PAID"
    assert list(
        AuditRecord.objects.filter(kind__in=["settlement", "refund_reversed"])
        .order_by("seq")
        .values_list("kind", flat=True)
    )[-2:] == ["settlement", "refund_reversed"]


def test_a_cancellation_reported_as_charge_refund_updated_is_reversed_too(
    site, paid, settled, sdk, deliver, members
):
    """Endpoints on API versions before 2024-10-28 get no ``refund.*`` events for a charge's
    refunds: Stripe reports the refund's update as ``charge.refund.updated`` (a Refund object).
    It was stored and ignored ("not an event Sill records"), so the refund stayed settled,
    its amount not refundable again, and nobody was told."""
    obj = as_dict(sdk.v1.refunds.retrieve(settled.provider_refund_id))
    obj.update(status="canceled")
    response = deliver(site, event("charge.refund.updated", obj, event_id="evt_legacy"))
    assert response.status_code == 200

    settled.refresh_from_db()
    assert (settled.status, settled.outcome_code) == ("failed", "failed_after_settlement")
    paid.refresh_from_db()
    assert (paid.amount_refunded_minor, paid.remaining.amount_minor) == (0, 8900)
    body = json.loads(AuditRecord.objects.get(kind="refund_reversed").payload)["body"]
    assert body["source"] == "evt_legacy"
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    assert "failed after settlement" in mail.outbox[0].subject.lower()
    # The same cancellation reported again as ``refund.updated`` changes nothing more.
    deliver(site, event("refund.updated", obj, event_id="evt_new_style"))
    assert AuditRecord.objects.filter(kind="refund_reversed").count() == 1
    assert len(mail.outbox) == 2


def test_a_failure_reported_after_a_later_refund_is_still_a_failure_to_act_on(
    site, paid, settled, sdk, deliver, members, client_for, django_capture_on_commit_callbacks
):
    """The $50 refund settles, a $20 one of the same order follows and settles, then Stripe
    reports the first failed: its $50 came back and nobody refunded it again (the $20 was made
    before the failure). It was hidden as "refunded again" by the later refund."""
    ensure_default_reasons(site)
    with django_capture_on_commit_callbacks(execute=True):
        later = create_staff_refund(
            site=site,
            order=Order.objects.get(pk=paid.order_id),
            actor=members["staff"].user,
            kind="amount",
            amount=Money(2000, "USD"),
            reason=RefundReason.objects.get(site=site, code="defective"),
        )
    assert Refund.objects.get(pk=later.pk).status == "succeeded"
    deliver(site, failed_event(sdk, settled))
    assert Refund.objects.get(pk=settled.pk).outcome_code == "failed_after_settlement"

    owner = client_for("owner")
    page = owner.get(f"/orders/{paid.order_id}/").content.decode()
    assert "Failed at the rail after it was settled" in page and "The money came back" in page
    open_failures = owner.get("/refunds/", {"status": "failed_open"}).content.decode()
    assert settled.pk in open_failures
    failed_orders = owner.get("/orders/", {"status": "refund_failed"}).content.decode()
    assert f"/orders/{paid.order_id}/" in failed_orders
    dashboard = owner.get("/").content.decode()
    assert (
        '<a href="/refunds/?status=failed_open"><strong class="todo-count">1</strong>' in dashboard
    )


def test_the_refund_list_its_csv_and_the_refund_page_name_its_status_alike(
    site, paid, settled, sdk, deliver, members, client_for
):
    """The list said "Failed after settlement" while its CSV export and the refund's own page
    said "Failed", as for a refund that never moved money."""
    deliver(site, failed_event(sdk, settled))
    owner = client_for("owner")
    listed = owner.get("/refunds/").content.decode()
    assert "Failed after settlement" in listed
    exported = b"".join(owner.get("/refunds/", {"format": "csv"}).streaming_content).decode()
    [header, row] = list(csv.reader(io.StringIO(exported)))
    assert row[header.index("Status")] == "Failed after settlement"
    page = owner.get(f"/refunds/{settled.pk}/").content.decode()
    assert ">Failed after settlement</span>" in page
