"""The inbox under real concurrency (PostgreSQL): one item per difference, one resolution.

Each thread has its own connection and transactions, as two workers or two owners would.
"""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from refunds.models import ReconciliationItem
from refunds.reconcile.differences import Difference
from refunds.reconcile.inbox import AlreadyResolved, clear_vanished, open_item, resolve_item
from sill.orders.models import Charge
from tests.threads import run_concurrently, run_while_an_append_commits

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DIFFERENCE = Difference(
    kind="missing_at_rail",
    subject="rf_concurrent",
    currency="USD",
    sill_amount_minor=2000,
    sill_status="succeeded",
    detail="Settled in Sill, not listed by the rail.",
)


def test_two_runs_finding_the_same_difference_open_one_item(make_order, site):
    charge = Charge.objects.get(order=make_order(total="20.00", rail="stripe"))
    results = run_concurrently(4, lambda i: open_item(charge=charge, difference=DIFFERENCE))
    assert sorted(results, key=str) == [False, False, False, True], results
    assert ReconciliationItem.objects.filter(site=site).count() == 1
    assert AuditRecord.objects.filter(site=site, kind="reconciliation_found").count() == 1


def test_two_people_resolving_at_once_write_one_resolution(make_order, site, members):
    charge = Charge.objects.get(order=make_order(total="20.00", rail="stripe"))
    open_item(charge=charge, difference=DIFFERENCE)
    item = ReconciliationItem.objects.get()
    people = [members["owner"].user, members["admin"].user]

    def resolve(i: int) -> object:
        return resolve_item(
            site=site, item_id=item.pk, actor=people[i], resolution="acknowledged", note=f"#{i}"
        )

    results = run_concurrently(2, resolve)
    assert sum(isinstance(r, ReconciliationItem) for r in results) == 1, results
    assert sum(isinstance(r, AlreadyResolved) for r in results) == 1, results
    assert AuditRecord.objects.filter(site=site, kind="reconciliation_resolved").count() == 1


# Before: the item was locked with its site joined (select_for_update() locks the site's row
# FOR UPDATE too) before its record's append: an append of the site committing meanwhile (a
# refund's decision: it holds the chain head, and its commit share-locks the site's row for
# its foreign keys) deadlocked with it, and the owner's form answered a server error.
def test_resolving_an_item_never_deadlocks_with_an_append_of_the_site(make_order, site, members):
    charge = Charge.objects.get(order=make_order(total="20.00", rail="stripe"))
    open_item(charge=charge, difference=DIFFERENCE)  # its record starts the site's chain
    item = ReconciliationItem.objects.get()

    resolved = run_while_an_append_commits(
        site_id=site.pk,
        run=lambda: resolve_item(
            site=site, item_id=item.pk, actor=members["owner"].user,
            resolution="acknowledged", note="checked",
        ),
    )  # fmt: skip

    assert isinstance(resolved, ReconciliationItem), resolved
    assert ReconciliationItem.objects.get(pk=item.pk).resolved_at is not None


# Before: Sill's own closing of an item a later run no longer found locked it with its site
# joined (select_for_update() locks the site's row FOR UPDATE too) before its record's append:
# an append of the site committing meanwhile deadlocked with it, and the reconciliation run
# ended on a database error with the item left open.
def test_clearing_a_vanished_item_never_deadlocks_with_an_append_of_the_site(make_order, site):
    charge = Charge.objects.get(order=make_order(total="20.00", rail="stripe"))
    open_item(charge=charge, difference=DIFFERENCE)  # its record starts the site's chain
    item = ReconciliationItem.objects.get()

    cleared = run_while_an_append_commits(
        site_id=site.pk, run=lambda: clear_vanished(keys=set(), charge=charge)
    )

    assert cleared == 1, cleared
    assert ReconciliationItem.objects.get(pk=item.pk).resolution == "cleared"
