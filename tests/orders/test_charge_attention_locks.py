"""An owner's resolution of a charge that needs attention takes its locks in the order every
money path takes them: the order, then the charge, the site's audit chain head last.

The other transaction here holds the order, then appends to the site's audit chain, as a
refund of the order or a sync of it does. A resolution that appended first and asked for the
order after would deadlock with it, and the owner's form would answer a 500.
"""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from sill.accounts import two_factor
from sill.accounts.models import Role
from sill.accounts.services import add_member, change_member_role, remove_member
from sill.errors import PermissionDenied
from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.models import Charge, Order
from tests.orders.in_doubt import charge_in_doubt
from tests.threads import (
    run_behind_a_member_change,
    run_while_a_writer_holds_then_appends,
    run_while_an_append_commits,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_recording_a_charge_never_deadlocks_with_a_writer_of_the_same_order(
    make_order, agent, members, site
):
    in_doubt = charge_in_doubt(make_order(status="PENDING", charged=False, placed_by_agent=agent))
    resolved = run_while_a_writer_holds_then_appends(
        table="orders_order",
        row_id=in_doubt.order_id,
        site_id=site.pk,
        run=lambda: resolve_charge_attention(
            charge=in_doubt,
            actor=members["owner"].user,
            outcome="charged",
            provider_charge_id="mock_ch_seen",
        ),
    )
    assert isinstance(resolved, Charge), resolved
    assert resolved.status == "succeeded"
    assert Order.objects.get(pk=in_doubt.order_id).status == "PAID"


# Every append to the site's chain holds the head until it commits, and its commit checks its
# foreign keys to the site (FOR KEY SHARE of the site's row). The charge's outcome locked the
# site's row FOR UPDATE with the order (a select_for_update() joining the site), then appended:
# a refund decided or a member changed on the same site at that moment deadlocked with it
# (the worker's settlement of an agent's purchase, or the owner's record of a charge in doubt).
@pytest.mark.parametrize("outcome", ["worker_charges", "owner_records"])
def test_a_charge_outcome_never_deadlocks_with_an_append_of_the_site(
    make_order, agent, members, site, outcome
):
    from django.db import transaction

    from audit.services import append_record
    from sill.orders.charging import charge_order
    from sill.rails.registry import ensure_mock_rail

    with transaction.atomic():  # the site's chain exists, as on any site in use
        append_record(site=site, kind="settings_change", body={"change": "test"})
    if outcome == "owner_records":
        in_doubt = charge_in_doubt(
            make_order(status="PENDING", charged=False, placed_by_agent=agent)
        )

        def run() -> object:
            return resolve_charge_attention(
                charge=in_doubt,
                actor=members["owner"].user,
                outcome="charged",
                provider_charge_id="mock_ch_seen",
            )
    else:
        order = make_order(status="PENDING", charged=False, placed_by_agent=agent)
        ensure_mock_rail(site)
        Charge.objects.create(
            order=order, rail="mock", amount_minor=order.total_minor, currency=order.currency,
            payment_method="pm_card_visa",
        )  # fmt: skip

        def run() -> object:
            return charge_order(order_id=order.pk)

    done = run_while_an_append_commits(site_id=site.pk, run=run)

    assert not isinstance(done, Exception), done
    assert Charge.objects.get(order__site=site, order__placed_by_agent=agent).status == "succeeded"


# Before: the owner was checked only before the resolution's transaction. Taken up while
# another owner's removal or demotion of them was on its way to the audit chain, the record
# of the charge went through after that change was confirmed: the chain read member_change,
# then attention_resolved by someone no longer an owner.
@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_an_owner_removed_or_demoted_as_they_record_a_charge_records_nothing(
    make_order, agent, members, site, change
):
    in_doubt = charge_in_doubt(make_order(status="PENDING", charged=False, placed_by_agent=agent))
    owner = members["owner"]
    other = add_member(site=site, email="owner2@roasters.example", role=Role.OWNER)
    records = AuditRecord.objects.count()
    assert records, "the site's chain exists (the charge's needs_attention record)"

    def owner_does() -> None:
        owner.refresh_from_db()
        if change == "removed":
            remove_member(membership=owner, actor=other)
        else:
            change_member_role(
                membership=owner, actor=other, role=Role.ADMIN, second_factor=two_factor.OPERATOR
            )

    changed, resolved = run_behind_a_member_change(
        site_id=site.pk,
        change=owner_does,
        run=lambda: resolve_charge_attention(
            charge=in_doubt, actor=owner.user, outcome="not_charged"
        ),
    )

    assert changed is None, changed
    assert isinstance(resolved, PermissionDenied), resolved
    charge = Charge.objects.get(pk=in_doubt.pk)
    assert (charge.status, charge.lease_until) == ("pending", None) and charge.attention_since
    added = AuditRecord.objects.order_by("seq")[records:]
    assert [r.kind for r in added] == ["member_change"]
