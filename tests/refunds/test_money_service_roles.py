"""The services that move or settle money check the acting member's role themselves.

Each is called directly, as a caller that skipped the view's check would (a task, a script,
a new API): a reviewer, a staff member, a member of another site, a deactivated owner and no
user at all are refused ``forbidden`` (403) with nothing changed: no record, no reservation,
nothing enqueued, nothing sent to the rail. The member the role allows still gets through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from audit.models import AuditRecord
from refunds.execution import execute_refund
from refunds.models import ReconciliationItem, Refund, RefundReason
from refunds.reasons.services import ensure_default_reasons
from refunds.reconcile.attention import resolve_attention
from refunds.reconcile.differences import Difference
from refunds.reconcile.inbox import open_item, resolve_item
from refunds.review.decisions import approve_refund, reject_refund
from refunds.staff.services import create_staff_refund
from sill.errors import PermissionDenied
from sill.orders.charge_attention import resolve_charge_attention
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.orders.in_doubt import charge_in_doubt
from tests.refunds.conftest import hold_refund

pytestmark = pytest.mark.django_db

REFUSED = ["reviewer", "staff", "outsider", "deactivated", "nobody"]


@pytest.fixture
def actor_of(members) -> Callable[[str], Any]:
    def actor(who: str) -> Any:
        if who == "nobody":
            return None
        if who == "deactivated":
            user = members["owner"].user
            user.is_active = False
            user.save(update_fields=["is_active"])
            return user
        return members[who].user

    return actor


def books() -> tuple[Any, ...]:
    """Everything a refused call could have changed."""
    return (
        AuditRecord.objects.count(),
        sorted(Refund.objects.values_list("id", "status", "amount_minor")),
        sorted(
            Charge.objects.values_list(
                "id", "status", "amount_reserved_minor", "amount_refunded_minor"
            )
        ),
        MockLedgerEntry.objects.count(),
    )


def refused(call: Callable[[], Any], captured: Any) -> None:
    before = books()
    with captured(execute=False) as callbacks, pytest.raises(PermissionDenied) as raised:
        call()
    assert raised.value.code == "forbidden" and raised.value.status == 403
    assert books() == before
    assert callbacks == []  # nothing enqueued


@pytest.mark.parametrize("who", REFUSED)
@pytest.mark.parametrize("decide", [approve_refund, reject_refund], ids=["approve", "reject"])
def test_only_owners_and_admins_decide_a_held_refund(
    who, decide, make_order, members, actor_of, django_capture_on_commit_callbacks
):
    held = hold_refund(order=make_order(total="40.00"), requested_by=members["staff"].user)

    refused(lambda: decide(refund=held, actor=actor_of(who)), django_capture_on_commit_callbacks)

    assert Refund.objects.get(pk=held.pk).status == "held"
    decided = decide(refund=held, actor=members["admin"].user)
    assert decided.status in ("processing", "rejected")


@pytest.mark.parametrize("who", ["reviewer", "clerk", "outsider", "deactivated", "nobody"])
def test_only_members_who_may_refund_issue_a_staff_refund(
    who, site, make_order, mock_rail, members, clerk, actor_of, django_capture_on_commit_callbacks
):
    order = make_order(total="25.00")
    ensure_default_reasons(site)
    reason = RefundReason.objects.get(site=site, code="defective")
    actor = clerk.user if who == "clerk" else actor_of(who)

    def ask(user: Any) -> Refund:
        return create_staff_refund(site=site, order=order, actor=user, kind="full", reason=reason)

    refused(lambda: ask(actor), django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=False):
        made = ask(members["staff"].user)  # a staff member allowed to refund
    assert (made.status, made.requested_by_id) == ("processing", members["staff"].user.pk), (
        made.status,
        made.outcome_code,
    )


@pytest.fixture
def needs_attention(make_order, mock_rail, staff_refund, settings) -> Refund:
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1  # the timeout leaves it in doubt at once
    mock_rail.config = {"refund": "timeout"}
    mock_rail.save()
    refund = staff_refund(make_order(total="30.00"))
    assert execute_refund(refund.id) == "needs_attention"
    return Refund.objects.select_related("site").get(pk=refund.pk)


@pytest.mark.parametrize("who", ["admin", *REFUSED])
def test_only_an_owner_records_what_the_dashboard_shows_for_a_refund(
    who, needs_attention, members, actor_of, django_capture_on_commit_callbacks
):
    refused(
        lambda: resolve_attention(
            refund=needs_attention, actor=actor_of(who), outcome="not_refunded"
        ),
        django_capture_on_commit_callbacks,
    )

    assert Refund.objects.get(pk=needs_attention.pk).status == "needs_attention"
    if who != "deactivated":  # the deactivated one is the owner
        resolved = resolve_attention(
            refund=needs_attention, actor=members["owner"].user, outcome="not_refunded"
        )
        assert resolved.status == "failed"


@pytest.mark.parametrize("who", ["admin", *REFUSED])
def test_only_an_owner_records_what_the_dashboard_shows_for_a_charge(
    who, make_order, agent, members, actor_of, django_capture_on_commit_callbacks
):
    order = make_order(
        status="PENDING", charged=False, placed_by_agent=agent, source_mandate_id="mnd_doubt"
    )
    charge = charge_in_doubt(order)

    refused(
        lambda: resolve_charge_attention(charge=charge, actor=actor_of(who), outcome="not_charged"),
        django_capture_on_commit_callbacks,
    )

    assert Charge.objects.get(pk=charge.pk).lease_until is None  # not left claimed
    if who != "deactivated":
        settled = resolve_charge_attention(
            charge=charge, actor=members["owner"].user, outcome="not_charged"
        )
        assert settled.status == "failed"


@pytest.mark.parametrize("who", REFUSED)
def test_only_owners_and_admins_resolve_a_reconciliation_item(
    who, site, make_order, members, actor_of, django_capture_on_commit_callbacks
):
    charge = Charge.objects.get(order=make_order(total="12.00"))
    assert open_item(
        charge=charge,
        difference=Difference(
            kind="missing_at_rail",
            subject="rf_roles",
            currency="USD",
            sill_amount_minor=1200,
            sill_status="succeeded",
            detail="Settled in Sill, not listed by the rail.",
        ),
    )
    item = ReconciliationItem.objects.get(site=site)

    def resolve(user: Any) -> Any:
        return resolve_item(
            site=site, item_id=item.pk, actor=user, resolution="fixed_at_rail", note="checked"
        )

    refused(lambda: resolve(actor_of(who)), django_capture_on_commit_callbacks)

    item.refresh_from_db()
    assert item.resolved_at is None
    assert resolve(members["admin"].user).resolved_at is not None
