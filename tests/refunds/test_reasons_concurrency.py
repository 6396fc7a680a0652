"""Concurrent reason-tree writes on several sites keep one valid tree (PostgreSQL).

Treebeard keeps every site's roots in one materialised-path forest, and a sorted insert
rewrites the paths after it; without the advisory lock in refunds.reasons.services two writers could
compute the same path.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from refunds.models import RefundReason
from refunds.reasons.services import add_reason, ensure_default_reasons
from tests.conftest import site_owner

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
