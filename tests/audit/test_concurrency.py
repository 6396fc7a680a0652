"""Concurrent appends on one site get a gap-free sequence (PostgreSQL row locks)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from audit.models import AuditKind
from audit.selectors import chain_verification, records_for
from audit.services import append_record
from sill.accounts.models import Site

THREADS = 8
APPENDS = 10


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_serialises_concurrent_appends(site: Site) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks")
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            start.wait()
            for i in range(APPENDS):
                with transaction.atomic():
                    append_record(site=site, kind=AuditKind.SETTLEMENT, body={"thread": n, "i": i})
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    assert [r.seq for r in records_for(site)] == list(range(1, THREADS * APPENDS + 1))
    result = chain_verification(site)
    assert result.ok, result
    assert result.count == THREADS * APPENDS
