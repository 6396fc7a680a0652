"""Reconciliation against localstripe through the real SDK: a seeded scenario with every kind
of difference, run twice, resolved, cleared, and the audit chain verified.

Charges are really made at localstripe. Differences are made the way they arise: a refund
made directly at localstripe with no webhook (outside Sill), and Sill records that disagree
with the rail, set up in the database (a settled refund Stripe never made, a settled amount
that differs from Stripe's, a failed refund Stripe did make, one that needs attention).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
import stripe
from django.core.management import call_command
from django.db.models import F
from django_celery_beat.models import PeriodicTask

from audit.models import AuditRecord
from refunds.models import ReconciliationItem, ReconciliationRun, Refund
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.runs import accounts_due, run_reconciliation
from refunds.staff.services import create_staff_refund
from refunds.tasks import reconcile_task
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund, Order
from sill.rails.base import ChargeRequest
from sill.rails.models import RailAccount
from sill.rails.registry import ensure_mock_rail
from sill.rails.stripe import StripeRail
from tests.rails.stripe_events import stripe_account

pytestmark = pytest.mark.django_db

KEY = "sk_test_sill_webhooks_0001"  # the key tests.rails.stripe_events.stripe_account stores


@pytest.fixture
def sdk(localstripe_url: str) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": localstripe_url}, max_network_retries=0)


@pytest.fixture
def account(site, localstripe_url) -> RailAccount:
    return stripe_account(site, enabled=True, api_base=localstripe_url)


@pytest.fixture
def charged(make_order, account, localstripe_url) -> Callable[..., Charge]:
    """``charged("40.00")``: an order on ``site`` really charged at localstripe."""

    def make(total: str = "40.00", **order_fields: Any) -> Charge:
        order = make_order(total=total, rail="stripe", **order_fields)
        result = StripeRail(secret_key=KEY, api_base=localstripe_url).charge(
            ChargeRequest(
                order_id=order.pk,
                amount=Money(order.total_minor, order.currency),
                payment_method="pm_card_visa",
                idempotency_key=f"sill-charge-{order.pk}",
            )
        )
        charge = Charge.objects.get(order=order)
        charge.provider_charge_id = result.provider_charge_id
        charge.provider_payment_id = result.provider_payment_id
        charge.save()
        return charge

    return make


def sill_refund(charge: Charge, *, status: str, amount_minor: int, provider_id: str = "") -> Refund:
    """A staff refund row as Sill would hold it, with the charge's figures to match."""
    refund = Refund.objects.create(
        site=charge.order.site,
        order=charge.order,
        charge=charge,
        origin="staff",
        amount_minor=amount_minor,
        currency=charge.currency,
        rail="stripe",
        decision="approved",
        status=status,
        provider_refund_id=provider_id,
    )
    if status == "succeeded":
        Charge.objects.filter(pk=charge.pk).update(
            amount_refunded_minor=F("amount_refunded_minor") + amount_minor
        )
    elif status == "needs_attention":
        Charge.objects.filter(pk=charge.pk).update(
            amount_reserved_minor=F("amount_reserved_minor") + amount_minor
        )
    return refund


@pytest.fixture
def scenario(site, members, charged, sdk, django_capture_on_commit_callbacks) -> dict[str, Any]:
    """One charge per kind of difference, plus one whose books agree."""
    # Agrees: a Sill refund made through the pipeline, executed at localstripe.
    agrees = charged("30.00")
    ensure_default_reasons(site)
    reason = site.refund_reasons.filter(active=True, numchild=0).first()
    with django_capture_on_commit_callbacks(execute=True):
        good = create_staff_refund(
            site=site,
            order=agrees.order,
            actor=members["owner"].user,
            kind="amount",
            amount=Money(1000, "USD"),
            reason=reason,
        )
    assert Refund.objects.get(pk=good.pk).status == "succeeded"

    # At the rail, not in Sill: refunded in the Stripe dashboard; the webhook never came.
    outside_charge = charged("40.00")
    outside = sdk.v1.refunds.create(
        params={"charge": outside_charge.provider_charge_id, "amount": 1500}
    )

    # In Sill, not at the rail: settled under an id Stripe does not have.
    missing_charge = charged("50.00")
    missing = sill_refund(
        missing_charge, status="succeeded", amount_minor=2000, provider_id="re_never_at_stripe"
    )

    # Amounts differ: Sill settled $25.00, Stripe refunded $20.00 for the same refund.
    amount_charge = charged("60.00")
    differs = sill_refund(amount_charge, status="succeeded", amount_minor=2500)
    at_stripe = sdk.v1.refunds.create(
        params={
            "charge": amount_charge.provider_charge_id,
            "amount": 2000,
            "metadata": {"sill_refund_id": differs.id},
        }
    )
    Refund.objects.filter(pk=differs.pk).update(provider_refund_id=at_stripe.id)

    # Status differs: Sill failed the refund (nothing moved), but Stripe made it.
    status_charge = charged("70.00")
    failed = sill_refund(status_charge, status="failed", amount_minor=3000)
    made = sdk.v1.refunds.create(
        params={
            "charge": status_charge.provider_charge_id,
            "amount": 3000,
            "metadata": {"sill_refund_id": failed.id},
        }
    )

    # Needs attention: the rail may have made it; Sill cannot say.
    attention_charge = charged("80.00")
    flagged = sill_refund(attention_charge, status="needs_attention", amount_minor=4000)

    return {
        "agrees": agrees,
        "outside_charge": outside_charge,
        "outside": outside,
        "missing": missing,
        "differs": differs,
        "failed": failed,
        "made": made,
        "flagged": flagged,
    }


def open_keys(site) -> list[str]:
    return sorted(
        ReconciliationItem.objects.filter(site=site, resolved_at__isnull=True).values_list(
            "key", flat=True
        )
    )


def test_it_finds_each_kind_of_difference_once_and_records_the_missed_refund(
    site, account, scenario
):
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.error == ""
    assert (run.charges_checked, run.charges_unreadable) == (6, 0)
    expected = sorted(
        [
            f"missing_in_sill:{scenario['outside'].id}",
            f"missing_at_rail:{scenario['missing'].id}",
            f"amount_differs:{scenario['differs'].id}",
            f"status_differs:{scenario['failed'].id}",
        ]
    )
    assert open_keys(site) == expected
    assert run.items_opened == 4

    # The missed refund now counts: it lowers what is refundable at once.
    recorded = ExternalRefund.objects.get(provider_refund_id=scenario["outside"].id)
    assert (recorded.amount_minor, recorded.counted_minor) == (1500, 1500)
    charge = Charge.objects.get(pk=scenario["outside_charge"].pk)
    assert charge.remaining == Money(2500, "USD")
    missed = ReconciliationItem.objects.get(kind="missing_in_sill")
    assert missed.sill_corrected and missed.rail_amount_minor == 1500

    found = AuditRecord.objects.filter(site=site, kind="reconciliation_found")
    assert found.count() == 4
    assert {r.subject_order_id for r in found} >= {scenario["missing"].order_id}

    # A second run finds the same differences and opens nothing new.
    again = run_reconciliation(account_id=account.pk, force=True)
    assert again is not None and (again.items_opened, again.items_cleared) == (0, 0)
    assert open_keys(site) == expected
    assert AuditRecord.objects.filter(site=site, kind="reconciliation_found").count() == 4
    assert ExternalRefund.objects.count() == 1


def test_it_moves_no_money(site, account, scenario, sdk):
    before = {
        c.provider_charge_id: sdk.v1.charges.retrieve(c.provider_charge_id).amount_refunded
        for c in Charge.objects.filter(order__site=site)
    }
    snapshot = sorted(Refund.objects.values_list("id", "status"))
    run_reconciliation(account_id=account.pk, force=True)
    after = {pid: sdk.v1.charges.retrieve(pid).amount_refunded for pid in before}
    assert after == before  # the rail's figures: nothing was refunded
    assert sorted(Refund.objects.values_list("id", "status")) == snapshot


def test_resolving_writes_a_signed_record_and_the_chain_verifies(
    site, account, scenario, client_for
):
    run_reconciliation(account_id=account.pk, force=True)
    item = ReconciliationItem.objects.get(kind="missing_at_rail")
    response = client_for("admin").post(
        f"/reconcile/{item.pk}/resolve/",
        {"resolution": "fixed_at_rail", "note": "Refunded again in the Stripe dashboard."},
    )
    assert response.status_code == 302
    item.refresh_from_db()
    assert (item.resolution, item.resolved_by.get_username()) == (
        "fixed_at_rail",
        "admin@roasters.example",
    )
    record = AuditRecord.objects.filter(site=site, kind="reconciliation_resolved").get()
    assert '"resolved_by":"admin@roasters.example"' in record.payload
    assert "Refunded again in the Stripe dashboard." in record.payload

    out = StringIO()
    call_command("audit", "verify", stdout=out)
    assert f"site {site.pk}: " in out.getvalue() and "records OK" in out.getvalue()


def test_a_difference_that_goes_away_is_cleared_by_sill_but_a_missed_refund_waits(
    site, account, scenario
):
    run_reconciliation(account_id=account.pk, force=True)
    # Someone fixes Sill's record of the failed refund that Stripe made: Sill now has it.
    Refund.objects.filter(pk=scenario["failed"].pk).update(
        status="succeeded", provider_refund_id=scenario["made"].id
    )
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.items_cleared == 1
    cleared = ReconciliationItem.objects.get(key=f"status_differs:{scenario['failed'].id}")
    assert (cleared.resolution, cleared.resolved_by) == ("cleared", None)
    record = AuditRecord.objects.filter(site=site, kind="reconciliation_resolved").get()
    assert '"resolution":"cleared"' in record.payload and '"resolved_by":null' in record.payload
    # The refund Sill had missed stays until a person acknowledges it.
    assert ReconciliationItem.objects.get(kind="missing_in_sill").resolved_at is None


def test_a_charge_the_rail_cannot_read_is_counted_and_the_run_goes_on(
    site, account, charged, sdk, caplog
):
    broken = charged("10.00")
    Charge.objects.filter(pk=broken.pk).update(provider_charge_id="ch_not_at_localstripe")
    fine = charged("20.00")
    sdk.v1.refunds.create(params={"charge": fine.provider_charge_id, "amount": 500})
    with caplog.at_level(logging.WARNING, logger="refunds.reconcile.runs"):
        run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (2, 1)
    assert "could not be read" in caplog.text
    assert ReconciliationItem.objects.filter(kind="missing_in_sill", charge=fine).exists()


def test_an_outside_refund_beside_a_refund_stripe_never_made_shows_both_differences(
    site, account, charged, sdk
):
    # Left alone by an earlier stop: Sill's books count a $30.00 refund Stripe never made, and
    # $20.00 was refunded in the dashboard. Recording the outside refund broke the charge's
    # CHECK, so the charge was "could not be read" on every run and neither difference showed.
    charge = charged("40.00")
    phantom = sill_refund(charge, status="succeeded", amount_minor=3000, provider_id="re_never")
    outside = sdk.v1.refunds.create(params={"charge": charge.provider_charge_id, "amount": 2000})
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and (run.charges_checked, run.charges_unreadable) == (1, 0)
    items = {i.kind: i for i in ReconciliationItem.objects.filter(charge=charge)}
    assert set(items) == {"missing_at_rail", "missing_in_sill"}
    assert items["missing_at_rail"].refund_id == phantom.id
    unrecorded = items["missing_in_sill"]
    assert (unrecorded.provider_refund_id, unrecorded.sill_corrected) == (outside.id, False)
    assert "it would exceed the charge" in unrecorded.detail
    assert not ExternalRefund.objects.filter(charge=charge).exists()
    charge.refresh_from_db()
    assert (charge.amount_refunded_minor, charge.amount_refunded_outside_minor) == (3000, 0)


def test_only_active_charges_are_checked_a_bounded_number_per_run(site, account, charged, settings):
    old = charged("10.00", days_ago=30)
    Charge.objects.filter(pk=old.pk).update(created_at=old.captured_at)
    recent = [charged("11.00"), charged("12.00"), charged("13.00")]
    settings.SILL_RECONCILE_MAX_CHARGES = 2
    first = run_reconciliation(account_id=account.pk, force=True)
    second = run_reconciliation(account_id=account.pk, force=True)
    assert first is not None and second is not None
    assert (first.charges_checked, second.charges_checked) == (2, 2)
    ids = sorted(c.pk for c in recent)
    assert first.cursor == ids[1]
    assert second.cursor == ids[0]  # went on with the third, then wrapped round
    assert old.pk not in {first.cursor, second.cursor}


def test_the_beat_task_runs_each_stripe_account_once_per_interval(site, account, scenario):
    ensure_mock_rail(site)  # the mock rail has no books of its own: never reconciled
    assert PeriodicTask.objects.get(task="refunds.reconcile").enabled
    assert accounts_due() == [account.pk]
    assert reconcile_task() == 1
    assert ReconciliationRun.objects.filter(site=site).count() == 1
    assert accounts_due() == []
    assert reconcile_task() == 0
    assert run_reconciliation(account_id=account.pk) is None  # not due yet
    assert len(open_keys(site)) == 4


def test_a_rail_that_cannot_be_built_records_why(site, account):
    account.secret_encrypted = b""
    account.save()
    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and "no API key" in run.error
    assert not ReconciliationItem.objects.exists()


def test_another_sites_charges_are_not_touched(site, other_site, account, charged, sdk):
    mine = charged("10.00")
    sdk.v1.refunds.create(params={"charge": mine.provider_charge_id, "amount": 300})
    theirs = stripe_account(other_site, enabled=True, api_base=account.api_base)
    run = run_reconciliation(account_id=theirs.pk, force=True)
    assert run is not None and run.charges_checked == 0
    assert not ReconciliationItem.objects.exists()
    assert Order.objects.get(pk=mine.order_id).site_id == site.pk


def test_a_charge_whose_outside_refund_is_still_pending_is_checked_however_old(
    site, account, charged, sdk
):
    """A refund made at Stripe outside Sill can stay pending for days, then settle or fail.
    Its charge left the run once nothing had happened to it for ``SILL_RECONCILE_DAYS``: a
    missed webhook of what became of the refund was never made up for, and Sill kept it
    pending (counted, or after a failure still holding the money unrefundable)."""
    charge = charged("40.00", days_ago=30)
    Charge.objects.filter(pk=charge.pk).update(created_at=charge.captured_at)
    made = sdk.v1.refunds.create(params={"charge": charge.provider_charge_id, "amount": 1500})
    long_ago = charge.captured_at
    ExternalRefund.objects.create(
        charge=charge,
        provider_refund_id=made.id,
        amount_minor=1500,
        currency="USD",
        counted_minor=1500,
        status="pending",
        created_at_rail=long_ago,
        rail_updated_at=long_ago,
    )
    ExternalRefund.objects.filter(charge=charge).update(recorded_at=long_ago)
    Charge.objects.filter(pk=charge.pk).update(amount_refunded_outside_minor=1500)

    run = run_reconciliation(account_id=account.pk, force=True)
    assert run is not None and run.charges_checked == 1
    assert ExternalRefund.objects.get(charge=charge).status == "succeeded"
