"""An owner removes a member, demotes them, revokes their API token or unlinks their Slack
user while that member's refund (or approval of a held one) is in flight: Sill has checked the
member's access and waits for Stripe's facts about the charge. Once the owner is told the
member is gone, that refund must not be made or paid: it is refused in the words of the check
made before the read, and nothing of it is reserved, written or sent.

A loopback Stripe answers the facts; while it answers the charge read, the owner acts in
another connection (the real service, committed), exactly between Sill's access check and its
decision's transaction (the agent side's trick: tests/refunds/test_switched_off_in_flight.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.models import AuditRecord
from refunds.models import IdempotencyRecord, ReconciliationItem, Refund, RefundStatus
from refunds.reconcile.attention import resolve_attention
from refunds.reconcile.inbox import open_item, resolve_item
from refunds.review.decisions import reject_refund
from refunds.review.slack import APPROVE, REJECT, TOKEN_REFUSED, Click, decide_click
from refunds.review.slack_link_checks import _record_token
from refunds.review.slack_setup import save_slack_settings
from refunds.staff.handled import mark_failure_handled
from sill.accounts import two_factor
from sill.accounts.models import Membership, MemberToken, Role, Site
from sill.accounts.services import (
    add_member,
    change_member_role,
    issue_member_token,
    remove_member,
    revoke_member_token,
)
from sill.errors import PermissionDenied
from sill.orders.models import Charge
from tests.conftest import site_owner
from tests.refunds.conftest import hold_refund
from tests.refunds.slack_stub import TEAM
from tests.refunds.test_attention_resolution_locks import in_doubt  # noqa: F401  (fixture)
from tests.refunds.test_reconcile_concurrency import DIFFERENCE
from tests.refunds.test_slack_approvals import Slack, slack  # noqa: F401  (fixture)
from tests.refunds.test_switched_off_in_flight import stripe_facts  # noqa: F401  (fixture)
from tests.threads import lock_waiters, run_behind_a_member_change

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FORBIDDEN = "Your role on this site does not allow this."


def _owner_of(member: Membership) -> Membership:
    return Membership.objects.select_related("site", "user").get(
        site_id=member.site_id, user=site_owner(member.site)
    )


def _fresh(member: Membership) -> Membership:
    return Membership.objects.select_related("site", "user").get(pk=member.pk)


def _removes(member: Membership) -> Callable[[], None]:
    """The owner's Remove on Settings → Members (in the caller's thread)."""
    return lambda: remove_member(membership=_fresh(member), actor=_owner_of(member))


def _demotes(member: Membership, role: str) -> Callable[[], None]:
    """The owner's role change on Settings → Members: ``member`` becomes ``role`` (staff
    without the refund permission)."""

    def demote() -> None:
        change_member_role(
            membership=_fresh(member), actor=_owner_of(member), role=role, can_refund=False,
            second_factor=two_factor.OPERATOR,
        )  # fmt: skip

    return demote


def _nothing_made(*, refunds: int = 0) -> None:
    assert Refund.objects.count() == refunds
    assert not IdempotencyRecord.objects.exists()  # the key is given back, not answered
    assert not AuditRecord.objects.filter(kind__in=("decision", "escalated_approved")).exists()


def _refund_form(client: Client, order: Any, leaf: Any) -> Any:
    return client.post(
        f"/orders/{order.id}/refund/",
        {
            "kind": "amount", "amount": "10.00", "reason": str(leaf.pk), "note": "",
            "expected_remaining_minor": "", "expected_refund_count": "", "confirmed": "1",
            "idempotency_key": "form-key-1",
        },
    )  # fmt: skip


def _switches_off(member: Membership) -> Callable[[], None]:
    """The account switched off (as the Django admin saves it: its sessions end)."""

    def switch_off() -> None:
        user = _fresh(member).user
        user.is_active = False
        user.save(update_fields=["is_active"])

    return switch_off


@pytest.mark.parametrize("change", ["removed", "demoted", "switched_off"])
def test_a_member_removed_demoted_or_switched_off_while_the_facts_are_read_refunds_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    make_order,
    members,
    leaf,
    client_for,
    change,
):
    staff = members["staff"]
    order = make_order(rail="stripe")
    client = client_for("staff")
    owner_does = {"removed": _removes, "switched_off": _switches_off}.get(change)
    stripe_facts.append(owner_does(staff) if owner_does else _demotes(staff, Role.STAFF))

    answer = _refund_form(client, order, leaf)

    assert not stripe_facts, "Stripe was never asked"
    assert answer.status_code == 422 and FORBIDDEN in answer.content.decode()
    _nothing_made()


def test_a_member_still_allowed_after_the_read_refunds(
    stripe_facts,  # noqa: F811 (a fixture)
    make_order,
    members,
    leaf,
    client_for,
):
    order = make_order(rail="stripe")
    stripe_facts.append(lambda: None)
    answer = _refund_form(client_for("staff"), order, leaf)

    assert not stripe_facts and answer.status_code == 303, answer.content
    assert Refund.objects.get().requested_by == members["staff"].user


def _api(order: Any, leaf: Any, token: str) -> Any:
    return Client().post(
        f"/api/order/{order.id}/refund",
        data=json.dumps({"amount": "10.00", "reasonId": str(leaf.pk)}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "api-key-1"},
    )


@pytest.mark.parametrize("change", ["revoked", "removed"])
def test_a_token_revoked_or_its_member_removed_while_the_facts_are_read_refunds_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    make_order,
    members,
    leaf,
    change,
):
    staff = members["staff"]
    order = make_order(rail="stripe")
    token = issue_member_token(
        membership=staff, actor=None, system=True, second_factor=two_factor.OPERATOR
    )

    def revoke() -> None:
        # The owner's Revoke on Settings → Members (the real service).
        revoke_member_token(
            token=MemberToken.objects.get(membership=staff), actor=_owner_of(staff).user
        )

    stripe_facts.append(revoke if change == "revoked" else _removes(staff))
    answer = _api(order, leaf, token)

    assert not stripe_facts, "Stripe was never asked"
    assert answer.status_code == 401, answer.content
    assert answer.json()["error"] == {
        "code": "not_authenticated", "message": "unknown or revoked token", "field": None,
    }  # fmt: skip
    _nothing_made()


def test_a_token_whose_member_is_demoted_while_the_facts_are_read_refunds_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    make_order,
    members,
    leaf,
):
    staff = members["staff"]
    order = make_order(rail="stripe")
    token = issue_member_token(
        membership=staff, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    stripe_facts.append(_demotes(staff, Role.STAFF))

    answer = _api(order, leaf, token)

    assert not stripe_facts, "Stripe was never asked"
    assert answer.status_code == 403, answer.content
    assert answer.json()["error"] == {"code": "forbidden", "message": FORBIDDEN, "field": None}
    _nothing_made()


def _held(make_order: Any, members: dict[str, Membership]) -> Refund:
    """The staff member's refund of a Stripe order, held for review (no owner acts yet)."""
    return hold_refund(order=make_order(rail="stripe"), requested_by=members["staff"].user)


@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_an_approver_removed_or_demoted_while_the_facts_are_read_approves_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    make_order,
    members,
    client_for,
    change,
):
    held = _held(make_order, members)
    admin = members["admin"]
    client = client_for("admin")
    stripe_facts.append(_removes(admin) if change == "removed" else _demotes(admin, Role.REVIEWER))

    answer = client.post(f"/held/{held.id}/approve/", headers={"Accept": "application/json"})

    assert not stripe_facts, "Stripe was never asked"
    assert answer.status_code == 403, answer.content
    assert answer.json()["error"]["message"] == FORBIDDEN
    _still_held(held)


def _still_held(held: Refund) -> None:
    held.refresh_from_db()
    assert (held.status, held.decided_by_id) == (RefundStatus.HELD, None)
    assert Charge.objects.get(pk=held.charge_id).amount_reserved_minor == 0
    assert not AuditRecord.objects.filter(kind="escalated_approved").exists()


def _slack_click_while(
    owner_does: Callable[[Membership], None],
    *,
    acts_while_read: list[Callable[[], None]],
    response_url: str,
    make_order: Any,
    members: Any,
) -> tuple[Refund | None, Refund, Membership]:
    """The admin's (linked, confirmed) Slack Approve of a held refund, with ``owner_does(admin)``
    done while Stripe answers the charge read: what the click decided, the refund, the admin."""
    held = _held(make_order, members)
    admin = members["admin"]
    Membership.objects.filter(pk=admin.pk).update(
        slack_user_id="U0ADMIN", slack_checked_at=timezone.now(), slack_team_id=TEAM
    )
    acts_while_read.append(lambda: owner_does(admin))
    click = Click(
        action=APPROVE, refund_id=held.id, slack_user_id="U0ADMIN", response_url=response_url,
        teams=(TEAM,),
    )  # fmt: skip
    decided = decide_click(site_id=admin.site_id, click=click)
    assert not acts_while_read, "Stripe was never asked"
    return decided, held, admin


def _told_privately() -> str:
    [told] = Slack.received
    assert told["response_type"] == "ephemeral"
    return str(told["text"])


def test_a_slack_link_removed_while_the_facts_are_read_approves_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    slack,  # noqa: F811 (a fixture)
    make_order,
    members,
    site,
):
    def unlink(admin: Membership) -> None:
        save_slack_settings(site=site, actor=site_owner(site), links={admin.pk: ""})

    decided, held, admin = _slack_click_while(
        unlink,
        acts_while_read=stripe_facts,
        response_url=slack,
        make_order=make_order,
        members=members,
    )

    assert decided is None
    assert Membership.objects.get(pk=admin.pk).slack_user_id == ""  # the owner was told so
    assert _told_privately() == "Your Slack user is not linked to a member of this site in Sill."
    _still_held(held)


# Before: the site's own Slack settings were read only when the click was taken up. A second
# factor required, or Slack's refusal of the bot token recorded, while Stripe was read: the
# click still approved (and the refund was made).
@pytest.mark.parametrize("change", ["two_factor_required", "token_refused"])
def test_a_site_setting_changed_while_the_facts_are_read_approves_nothing(
    stripe_facts,  # noqa: F811 (a fixture)
    slack,  # noqa: F811 (a fixture)
    make_order,
    members,
    site,
    change,
):
    assert not site.require_two_factor and not site.slack_token_refused

    def switch(admin: Membership) -> None:
        if change == "two_factor_required":
            two_factor.set_required(site_id=site.pk, required=True)
        else:
            _record_token(
                site=Site.objects.get(pk=site.pk), refused="token_revoked", answered=False
            )

    decided, held, _ = _slack_click_while(
        switch,
        acts_while_read=stripe_facts,
        response_url=slack,
        make_order=make_order,
        members=members,
    )

    assert decided is None
    told = _told_privately()
    assert ("second factor" in told) if change == "two_factor_required" else told == TOKEN_REFUSED
    _still_held(held)


def _waiting(raw: Any) -> int:
    """How many other connections of this test database wait for a lock."""
    return lock_waiters(raw)


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for a lock wait"
        time.sleep(0.01)


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:  # looked at by the test
            out.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


# Before: a rejection checked its member only before its transaction. Queued behind another
# decision of the refund, it went on after the owner had removed or demoted the member (and
# been told so): the member_change record came first, the member's rejection after it.
@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_a_rejecter_removed_or_demoted_while_the_rejection_waits_is_confirmed_after_it(
    make_order, agent, members, change
):
    held = hold_refund(order=make_order(), agent=agent)
    admin = members["admin"]
    owner_does = _removes(admin) if change == "removed" else _demotes(admin, Role.REVIEWER)
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    try:
        # Another decision of the refund holds its row: the rejection queues behind it.
        raw.execute("BEGIN")
        raw.execute("SELECT 1 FROM refunds_refund WHERE id = %s FOR UPDATE", [held.pk])
        rejecting, rejected = _in_thread(
            lambda: reject_refund(refund=Refund.objects.get(pk=held.pk), actor=admin.user)
        )
        _until(lambda: _waiting(raw) >= 1)
        changing, changed = _in_thread(owner_does)
        # The owner's change waits for the rejection, or (before) commits at once.
        _until(lambda: bool(changed) or _waiting(raw) >= 2)
        raw.execute("COMMIT")
        rejecting.join(timeout=30)
        changing.join(timeout=30)
    finally:
        raw.close()

    assert changed == [None], changed
    kinds = list(
        AuditRecord.objects.filter(kind__in=("escalated_rejected", "member_change"))
        .order_by("seq")
        .values_list("kind", flat=True)
    )
    # The rejection holds the member's rows from its start: the owner's change waited for it,
    # and was confirmed once the rejection was made.
    held.refresh_from_db()
    assert (held.status, held.decided_by_id) == (RefundStatus.REJECTED, admin.user_id), rejected
    assert kinds == ["escalated_rejected", "member_change"]


# --- an owner's change in flight (waiting for the site's audit chain) as the member acts -------


def _second_owner(site: Site) -> Membership:
    """Another owner of ``site``, who changes the ``members`` fixture's owner."""
    return add_member(site=site, email="owner2@roasters.example", role=Role.OWNER)


def _demoted_by(changer: Membership, member: Membership, role: str) -> Callable[[], None]:
    def demote() -> None:
        change_member_role(
            membership=_fresh(member), actor=_fresh(changer), role=role, can_refund=False,
            second_factor=two_factor.OPERATOR,
        )  # fmt: skip

    return demote


def _audit_kinds(*kinds: str) -> list[str]:
    return list(
        AuditRecord.objects.filter(kind__in=kinds).order_by("seq").values_list("kind", flat=True)
    )


# Before: an owner's resolution of a refund that needs attention checked the owner only before
# its transaction. Taken up while another owner's demotion (or removal) of them was on its way
# to the audit chain, it settled the refund (or released its money) after that change: the
# chain read member_change, then attention_resolved by someone no longer an owner.
@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_an_owner_removed_or_demoted_as_they_resolve_attention_resolves_nothing(
    in_doubt,  # noqa: F811 (a fixture)
    members,
    site,
    change,
):
    owner, other = members["owner"], _second_owner(site)
    owner_does = (
        (lambda: remove_member(membership=_fresh(owner), actor=_fresh(other)))
        if change == "removed"
        else _demoted_by(other, owner, Role.ADMIN)
    )

    changed, resolved = run_behind_a_member_change(
        site_id=site.pk,
        change=owner_does,
        run=lambda: resolve_attention(refund=in_doubt, actor=owner.user, outcome="not_refunded"),
    )

    assert changed is None, changed
    assert isinstance(resolved, PermissionDenied), resolved
    in_doubt.refresh_from_db()
    assert in_doubt.status == RefundStatus.NEEDS_ATTENTION and in_doubt.lease_until is None
    assert Charge.objects.get(pk=in_doubt.charge_id).amount_reserved_minor == in_doubt.amount_minor
    assert _audit_kinds("attention_resolved", "member_change") == ["member_change"]


def _removed_or_demoted(change: str, member: Membership, role: str) -> Callable[[], None]:
    """The owner's Remove, or change of ``member`` to ``role``, on Settings → Members."""
    return _removes(member) if change == "removed" else _demotes(member, role)


# Before: a reconciliation item's resolution checked its member only before its transaction:
# taken up while an owner's removal or demotion of them was on its way to the audit chain, it
# was written after that change, by someone who could no longer resolve it.
@pytest.mark.parametrize("change", ["removed", "demoted"])
def test_a_member_removed_or_demoted_as_they_resolve_a_reconciliation_item_resolves_nothing(
    make_order, members, site, change
):
    charge = Charge.objects.get(order=make_order(total="20.00", rail="stripe"))
    open_item(charge=charge, difference=DIFFERENCE)  # its record starts the site's chain
    item = ReconciliationItem.objects.get()
    admin = members["admin"]

    changed, resolved = run_behind_a_member_change(
        site_id=site.pk,
        change=_removed_or_demoted(change, admin, Role.REVIEWER),
        run=lambda: resolve_item(
            site=site, item_id=item.pk, actor=admin.user, resolution="acknowledged",
            note="checked",
        ),
    )  # fmt: skip

    assert changed is None, changed
    assert isinstance(resolved, PermissionDenied), resolved
    assert ReconciliationItem.objects.get(pk=item.pk).resolved_at is None
    assert _audit_kinds("reconciliation_resolved", "member_change") == ["member_change"]


# Before: a Slack Reject checked the clicker's link only when the click was taken up; its
# transaction checked the member's role again, not the link. Taken up while an owner's unlink
# of that Slack user was on its way to the audit chain, it rejected the refund after the
# unlink was confirmed, as the member the Slack user no longer spoke for.
def test_a_slack_user_unlinked_as_their_reject_is_taken_up_rejects_nothing(
    slack,  # noqa: F811 (a fixture)
    make_order,
    agent,
    members,
    site,
):
    held = hold_refund(order=make_order(), agent=agent)  # its record starts the site's chain
    admin = members["admin"]
    Membership.objects.filter(pk=admin.pk).update(
        slack_user_id="U0ADMIN", slack_checked_at=timezone.now(), slack_team_id=TEAM
    )
    click = Click(
        action=REJECT, refund_id=held.id, slack_user_id="U0ADMIN", response_url=slack,
        teams=(TEAM,),
    )  # fmt: skip

    changed, decided = run_behind_a_member_change(
        site_id=site.pk,
        change=lambda: save_slack_settings(site=site, actor=site_owner(site), links={admin.pk: ""}),
        run=lambda: decide_click(site_id=site.pk, click=click),
    )

    assert changed == ["Slack user of admin@roasters.example cleared"], changed
    assert decided is None, decided
    assert _told_privately() == "Your Slack user is not linked to a member of this site in Sill."
    held.refresh_from_db()
    assert (held.status, held.decided_by_id) == (RefundStatus.HELD, None)
    assert not AuditRecord.objects.filter(kind="escalated_rejected").exists()


# Before: marking a failed refund handled checked the member only before its transaction: taken
# up while an owner's removal or demotion of them was on its way to the audit chain, it was
# recorded after that change, by someone who could no longer mark it.
def test_a_member_demoted_as_they_mark_a_failure_handled_marks_nothing(
    order, mock_rail, staff_refund, members, site
):
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    failed = staff_refund(order)  # executed on commit (a transactional test): declined
    failed.refresh_from_db()
    assert failed.status == RefundStatus.FAILED
    admin = members["admin"]

    changed, marked = run_behind_a_member_change(
        site_id=site.pk,
        change=_removed_or_demoted("demoted", admin, Role.REVIEWER),
        run=lambda: mark_failure_handled(refund=failed, actor=admin.user, note="store credit"),
    )

    assert changed is None, changed
    assert isinstance(marked, PermissionDenied), marked
    assert Refund.objects.get(pk=failed.pk).failure_handled_at is None
    assert _audit_kinds("failure_handled", "member_change") == ["member_change"]
