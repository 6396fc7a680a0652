"""Concurrent reason-tree writes on several sites keep one valid tree (PostgreSQL).

Treebeard keeps every site's roots in one materialised-path forest, and a sorted insert
rewrites the paths after it; without the advisory lock in refunds.reasons.services two writers could
compute the same path.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from audit.models import AuditRecord
from refunds.models import RefundReason
from refunds.reasons.services import (
    add_reason,
    delete_reason,
    ensure_default_reasons,
    move_reason,
    rename_reason,
    set_reason_active,
)
from sill.accounts import two_factor
from sill.accounts.models import Membership, Role, Site
from sill.accounts.services import change_member_role, remove_member
from sill.errors import PermissionDenied
from tests.conftest import site_owner
from tests.threads import run_behind_a_member_change

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_concurrent_adds_and_seeding_on_two_sites_keep_a_valid_tree(site, other_site):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    sites = [site, other_site]
    barrier = threading.Barrier(12)
    errors: list[BaseException] = []
    owners = [site_owner(s) for s in sites]  # made here: the threads only add reasons

    def work(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            target, owner = sites[i % 2], owners[i % 2]
            ensure_default_reasons(target)
            parent = add_reason(site=target, actor=owner, name=f"Group {i:02d}")
            add_reason(site=target, actor=owner, name=f"Leaf {i:02d}", parent=parent)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for s in sites:
        assert RefundReason.objects.filter(site=s).count() == 5 + 12
    assert all(not problems for problems in RefundReason.objects.find_problems())
    roots = list(RefundReason.objects.filter(depth=1).values_list("name", flat=True))
    assert roots == sorted(roots)


def _reasons(site: Site) -> list[tuple[object, ...]]:
    return list(
        RefundReason.objects.filter(site=site)
        .order_by("path")
        .values_list("path", "name", "active")
    )


# Before: each change of the reasons checked its member only at its transaction's start, a
# plain read. Taken up while an owner's removal or demotion of that admin was in flight
# (written, waiting for the site's audit chain behind another append), it went on after the
# owner's change was confirmed: the chain read member_change, then the reason_change of someone
# who could no longer manage reasons.
@pytest.mark.parametrize(
    ("action", "change"),
    [("add", "demoted"), ("rename", "removed"), ("move", "demoted"), ("deactivate", "removed"),
     ("delete", "demoted")],
)  # fmt: skip
def test_an_admin_removed_or_demoted_as_they_change_the_reasons_changes_nothing(
    site, members, action, change
):
    owner, admin = members["owner"], members["admin"]
    group = add_reason(site=site, actor=owner.user, name="Product problem")  # starts the chain
    mine = add_reason(site=site, actor=owner.user, name="Arrived late", parent=group)
    before, records = _reasons(site), AuditRecord.objects.count()
    admin_does = {
        "add": lambda: add_reason(site=site, actor=admin.user, name="Goodwill"),
        "rename": lambda: rename_reason(reason=mine, actor=admin.user, name="Late"),
        "move": lambda: move_reason(reason=mine, actor=admin.user, parent=None),
        "deactivate": lambda: set_reason_active(reason=mine, actor=admin.user, active=False),
        "delete": lambda: delete_reason(reason=mine, actor=admin.user),
    }[action]

    def owner_does() -> None:
        membership = Membership.objects.select_related("site", "user").get(pk=admin.pk)
        if change == "removed":
            remove_member(membership=membership, actor=owner)
        else:
            change_member_role(
                membership=membership, actor=owner, role=Role.REVIEWER,
                second_factor=two_factor.OPERATOR,
            )  # fmt: skip

    changed, done = run_behind_a_member_change(site_id=site.pk, change=owner_does, run=admin_does)

    assert changed is None, changed
    assert isinstance(done, PermissionDenied), done
    assert _reasons(site) == before
    added = AuditRecord.objects.order_by("seq")[records:]
    assert [r.kind for r in added] == ["member_change"]
