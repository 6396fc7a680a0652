"""Reconciliation running while Sill refunds, or while a webhook records an outside refund.

A run reads the charge's refunds at the rail, then Sill's books. Whatever Sill settles or
records between the two was not in the rail's list when it was read: it is no difference,
and no item (with its signed ``reconciliation_found`` record) may say "the buyer may not have
been paid back" for a refund that was paid back. Against localstripe through the real SDK;
the run's rail is the real Stripe rail, handed to ``reconcile_charge`` with the other party's
step run between its read and its return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from audit.models import AuditRecord
from refunds.models import ReconciliationItem, Refund
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.inbox import reconcile_charge
from refunds.staff.services import create_staff_refund
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund
from sill.rails.base import RailRefund
from sill.rails.models import WebhookEvent
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import process_event
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event, post_event
from tests.refunds.test_reconcile_localstripe import KEY, account, charged, sdk  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


class ReadThenStep(StripeRail):
    """The Stripe rail whose ``list_refunds`` answers what Stripe held when it was asked, after
    ``step`` ran: as if the step happened while the answer was on its way."""

    def __init__(self, *, step: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step = step

    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        listed = super().list_refunds(provider_charge_id, provider_payment_id=provider_payment_id)
        self.step()
        return listed


def test_a_refund_sill_settles_while_the_rail_is_read_is_no_difference(
    site,
    members,
    charged,  # noqa: F811 (a fixture)
    localstripe_url,
    django_capture_on_commit_callbacks,
):
    charge = charged("40.00")
    ensure_default_reasons(site)
    reason = site.refund_reasons.filter(active=True, numchild=0).first()

    def staff_refund() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            create_staff_refund(
                site=site,
                order=charge.order,
                actor=members["owner"].user,
                kind="amount",
                amount=Money(1500, "USD"),
                reason=reason,
            )

    rail = ReadThenStep(step=staff_refund, secret_key=KEY, api_base=localstripe_url)
    reconcile_charge(charge=charge, rail=rail, event_id="reconcile:race")

    refund = Refund.objects.get(charge=charge)
    assert refund.status == "succeeded"  # paid back, at the rail and in Sill
    assert not ReconciliationItem.objects.filter(charge=charge).exists()
    assert not AuditRecord.objects.filter(kind="reconciliation_found").exists()

    # The next run reads the refund at the rail, and the books agree.
    again = StripeRail(secret_key=KEY, api_base=localstripe_url)
    outcome = reconcile_charge(charge=charge, rail=again, event_id="reconcile:next")
    assert (outcome.opened, outcome.cleared) == (0, 0)
    assert not ReconciliationItem.objects.filter(charge=charge).exists()


def test_an_outside_refund_recorded_while_the_rail_is_read_is_no_difference(
    site,
    charged,  # noqa: F811 (a fixture)
    sdk,  # noqa: F811 (a fixture)
    localstripe_url,
):
    charge = charged("40.00")

    def dashboard_refund_and_its_webhook() -> None:
        made = sdk.v1.refunds.create(params={"charge": charge.provider_charge_id, "amount": 1500})
        body = event("refund.created", as_dict(made), event_id="evt_outside_during_run")
        response = post_event(site, body)
        assert response.status_code == 200
        process_event(WebhookEvent.objects.get(event_id="evt_outside_during_run").pk)

    rail = ReadThenStep(
        step=dashboard_refund_and_its_webhook, secret_key=KEY, api_base=localstripe_url
    )
    reconcile_charge(charge=charge, rail=rail, event_id="reconcile:race")

    assert ExternalRefund.objects.get(charge=charge).counted_minor == 1500
    assert Charge.objects.get(pk=charge.pk).remaining == Money(2500, "USD")
    assert not ReconciliationItem.objects.filter(charge=charge).exists()
    assert not AuditRecord.objects.filter(kind="reconciliation_found").exists()


class ListedPending(StripeRail):
    """Stripe's list read just before the refund failed: it still shows it pending."""

    def list_refunds(
        self, provider_charge_id: str, *, provider_payment_id: str = ""
    ) -> list[RailRefund]:
        listed = super().list_refunds(provider_charge_id, provider_payment_id=provider_payment_id)
        return [replace(r, status="pending") for r in listed]


def test_a_failure_stripe_reports_in_the_second_the_rail_was_read_is_applied(
    site,
    charged,  # noqa: F811 (a fixture)
    sdk,  # noqa: F811 (a fixture)
    localstripe_url,
    django_capture_on_commit_callbacks,
):
    """Stripe's event times have one-second resolution; the run recorded the refund it read as
    of its own clock, to the microsecond. A failure in the same second after the read carries
    a time earlier than that record, and was dropped as "a newer event was already applied":
    the refund that failed kept counting, and the money stayed unrefundable."""
    charge = charged("40.00")
    made = as_dict(
        sdk.v1.refunds.create(params={"charge": charge.provider_charge_id, "amount": 1500})
    )
    rail = ListedPending(secret_key=KEY, api_base=localstripe_url)
    reconcile_charge(charge=charge, rail=rail, event_id="reconcile:pending")
    recorded = ExternalRefund.objects.get(charge=charge)
    assert (recorded.status, recorded.counted_minor) == ("pending", 1500)

    # The failure happened within the second of the read (after the list was taken).
    failed = {**made, "status": "failed", "failure_reason": "lost_or_stolen_card"}
    second = int(recorded.rail_updated_at.timestamp())
    body = event("refund.failed", failed, event_id="evt_failed_same_second", created=second)
    with django_capture_on_commit_callbacks(execute=True):
        assert post_event(site, body).status_code == 200

    recorded.refresh_from_db()
    assert (recorded.status, recorded.counted_minor) == ("failed", 0)
    assert Charge.objects.get(pk=charge.pk).remaining == Money(4000, "USD")
