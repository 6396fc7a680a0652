"""A reconciliation run whose worker died: the page says it stopped, and the next run goes on.

Seen before: a run wrote nothing until it finished, so one whose worker died (killed, or past
the task's time limit) read "still running" on the Reconciliation page until the next run an
hour later, and the next run started again from the last *finished* run's place: a run killed
each time at the same point checked the same first charges again and again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from billiard.pool import soft_timeout_sighandler
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


def _charges(make_order, n: int) -> list:
    return sorted((make_order(rail="stripe").charges.get() for _ in range(n)), key=lambda c: c.pk)


def test_a_run_out_of_its_time_stops_between_charges_and_the_next_goes_on(
    site, make_order, stripe_account, settings, client_for
):
    """Seen before: the run read every charge due whatever the time, past the task's limits."""
    settings.SILL_RECONCILE_MAX_SECONDS = 0  # used up by the first charge
    first, second = _charges(make_order, 2)

    run = run_reconciliation(account_id=stripe_account.pk, force=True)
    assert run is not None and run.finished_at is not None and run.out_of_time
    assert (run.charges_checked, run.charges_unreadable, run.cursor) == (1, 0, first.pk)
    html = client_for("owner").get("/reconcile/").content.decode()
    assert "1 charge; it ran out of time, and the next check goes on from there" in html

    following = run_reconciliation(account_id=stripe_account.pk, force=True)
    assert following is not None and following.cursor == second.pk


class _SoftLimitStub(stripe_facts_stub.StripeFactsStub):
    """Reading ``at``'s refunds, the worker's soft time limit goes off (the signal a prefork
    worker's pool sends its child, handled as the child handles it)."""

    at = ""

    def answer(
        self, path: str, query: dict[str, list[str]], method: str = "GET"
    ) -> tuple[int, dict[str, Any], str]:
        if path.endswith("/refunds") and query.get("charge") == [self.at]:
            os.kill(os.getpid(), signal.SIGUSR1)
        return super().answer(path, query, method)


def test_the_soft_time_limit_in_a_charge_read_ends_the_run_and_leaves_that_charge_next(
    site, make_order, settings
):
    """Seen before: the SoftTimeLimitExceeded (wrapped by Stripe's SDK as a connection error)
    was counted as one charge that could not be read, and the run read on to the hard kill."""
    first, second, _third = _charges(make_order, 3)
    stub = _SoftLimitStub()
    stub.at = second.provider_charge_id
    before = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    try:
        with keepalive_server(stripe_facts_stub.Handler, stub=stub) as server:
            account = RailAccount(site=site, rail="stripe", api_base=server.url, enabled=True)
            account.set_secret(stripe_facts_stub.KEY)
            account.save()
            run = run_reconciliation(account_id=account.pk, force=True)
    finally:
        signal.signal(signal.SIGUSR1, before)

    assert run is not None and run.finished_at is not None and run.out_of_time
    assert (run.charges_checked, run.charges_unreadable, run.cursor) == (1, 0, first.pk)
    assert ReconciliationRun.objects.get(pk=run.pk).out_of_time
    # The third charge was never read.
    assert stub.seen.count("refunds") == 2
