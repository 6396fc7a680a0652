"""A refund made in the Stripe dashboard, reported by its webhook and found by reconciliation
at the same moment (two threads, each with its own PostgreSQL connection, as a webhook worker
and a reconciliation worker would): it is counted once, whichever records it first.

Against localstripe through the real SDK. The event is stored as the webhook view stores it
(``store_event``), then processed by the task's function in one thread while a reconciliation
of the charge runs in the other.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import AuditRecord
from refunds.models import ReconciliationItem
from refunds.reconcile.inbox import reconcile_charge
from sill.money import Money
from sill.orders.models import Charge, ExternalRefund
from sill.rails.models import WebhookEvent
from sill.rails.stripe import StripeRail
from sill.rails.stripe_events import process_event
from sill.rails.stripe_webhooks import store_event
from tests.rails.localstripe_fixtures import as_dict
from tests.rails.stripe_events import event
from tests.refunds.test_reconcile_localstripe import KEY, account, charged, sdk  # noqa: F401 (fixtures)
from tests.threads import run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("kind", ["refund.created", "charge.refunded"])
def test_a_dashboard_refund_reported_and_reconciled_at_once_is_counted_once(
    site,
    account,  # noqa: F811 (a fixture)
    charged,  # noqa: F811 (a fixture)
    sdk,  # noqa: F811 (a fixture)
    localstripe_url,
    kind,
):
    charge = charged("40.00")
    made = as_dict(
        sdk.v1.refunds.create(params={"charge": charge.provider_charge_id, "amount": 1500})
    )
    obj = made
    if kind == "charge.refunded":
        obj = as_dict(sdk.v1.charges.retrieve(charge.provider_charge_id))
        obj["refunds"] = {"object": "list", "data": [made]}
    stored = store_event(account=account, payload=event(kind, obj, event_id="evt_dashboard"))
    assert stored is not None

    def work(i: int) -> object:
        if i == 0:
            return process_event(stored.pk)
        rail = StripeRail(secret_key=KEY, api_base=localstripe_url)
        return reconcile_charge(charge=charge, rail=rail, event_id="reconcile:concurrent")

    results = run_concurrently(2, work)
    assert not any(isinstance(r, Exception) for r in results), results

    [row] = ExternalRefund.objects.filter(charge=charge)
    assert (row.provider_refund_id, row.counted_minor, row.status) == (
        made["id"],
        1500,
        "succeeded",
    )
    assert Charge.objects.get(pk=charge.pk).remaining == Money(2500, "USD")
    assert AuditRecord.objects.filter(site=site, kind="external_refund").count() == 1
    assert ReconciliationItem.objects.filter(charge=charge).count() <= 1
    assert WebhookEvent.objects.get(pk=stored.pk).processed_at is not None

    # A later run, and the event delivered again, leave the books as they are.
    rail = StripeRail(secret_key=KEY, api_base=localstripe_url)
    reconcile_charge(charge=charge, rail=rail, event_id="reconcile:after")
    assert Charge.objects.get(pk=charge.pk).amount_refunded_outside_minor == 1500
    assert AuditRecord.objects.filter(site=site, kind="external_refund").count() == 1
    out = StringIO()
    call_command("audit", "verify", "--site", site.pk, stdout=out)
    assert "OK" in out.getvalue()
