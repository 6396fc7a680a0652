"""A reconciliation run whose worker died: the page says it stopped, and the next run goes on.

Seen before: a run wrote nothing until it finished, so one whose worker died (killed, or past
the task's time limit) read "still running" on the Reconciliation page until the next run an
hour later, and the next run started again from the last *finished* run's place: a run killed
each time at the same point checked the same first charges again and again.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from refunds.models import ReconciliationRun
from refunds.reconcile.runs import run_reconciliation
from sill.rails.models import RailAccount
from tests.rails import stripe_facts_stub
from tests.rails.loopback import keepalive_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def stripe_account(site) -> Iterator[RailAccount]:
    stub = stripe_facts_stub.StripeFactsStub()  # lists no refunds and no disputes
    with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
        account = RailAccount(site=site, rail="stripe", api_base=server.url, enabled=True)
        account.set_secret(stripe_facts_stub.KEY)
        account.save()
        yield account


def test_a_silent_unfinished_run_reads_as_stopped_and_a_live_one_as_running(client_for, site):
    now = timezone.now()
    ReconciliationRun.objects.create(
        site=site, rail="stripe", started_at=now - timedelta(minutes=40),
        progress_at=now - timedelta(minutes=11), charges_checked=3, cursor="ch_3",
    )  # fmt: skip
    ReconciliationRun.objects.create(
        site=site, rail="paypal", started_at=now - timedelta(minutes=30),
        progress_at=now - timedelta(minutes=1), charges_checked=7,
    )  # fmt: skip
    html = client_for("owner").get("/reconcile/").content.decode()
    stripe_line = html[html.index("<strong>Stripe</strong>") :].split("</p>")[0]
    paypal_line = html[html.index("<strong>PayPal</strong>") :].split("</p>")[0]
    assert "stopped before it finished</span>, after 3 charges" in stripe_line
    assert "still running" not in stripe_line
    assert "still running" in paypal_line  # it wrote progress a minute ago


def test_the_next_run_starts_when_due_and_goes_on_from_where_a_stopped_one_got_to(
    site, make_order, stripe_account, settings
):
    settings.SILL_RECONCILE_MAX_CHARGES = 1
    first, second = (make_order(rail="stripe").charges.get() for _ in range(2))
    now = timezone.now()
    ReconciliationRun.objects.create(
        site=site, rail="stripe", started_at=now - timedelta(minutes=61),
        progress_at=now - timedelta(minutes=60), charges_checked=1, cursor=first.pk,
    )  # fmt: skip

    run = run_reconciliation(account_id=stripe_account.pk)  # due: not forced
    assert run is not None and run.finished_at is not None
    assert (run.charges_checked, run.cursor) == (1, second.pk)
    assert ReconciliationRun.objects.get(pk=run.pk).progress_at is not None
