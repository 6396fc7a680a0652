"""An append builds and signs its record before it locks the site's chain head (issue 18).

The payload is spliced around the body's canonical bytes (the body is canonicalised once),
so it must equal RFC 8785 of the whole payload; and when another append of the site commits
between the record's building and the lock, the record is built again on the new head: the
chain stays gap-free and unbroken, and the caller hears of the new hash.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, transaction

from audit import chain
from audit.models import AuditKind, AuditRecord
from audit.selectors import chain_verification, records_for
from audit.services import append_record
from sill.accounts.models import Site

BODIES = [
    {"refund_id": "rf_1", "amount_minor": 8900, "currency": "USD"},
    {"note": 'café ☕ \u2028 "quoted" \\ \n\t\x01', "nested": {"z": [1, None, True], "a": {}}},
    {"€": 1, "a": -(2**53 - 1), "🙂": "x", "list": [[], [{}], "é"]},
    {},
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", BODIES)
def test_the_spliced_payload_is_the_canonical_payload(site: Site, body: dict) -> None:
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"warm": 1})
        record = append_record(site=site, kind=AuditKind.SETTLEMENT, body=body)
    stored = AuditRecord.objects.get(pk=record.pk)
    assert stored.payload.encode("utf-8") == chain.canonical(json.loads(stored.payload))
    assert json.loads(stored.payload)["body"] == body
    assert chain_verification(site).ok


@pytest.mark.django_db
def test_before_lock_sees_the_final_record_on_an_uncontended_append(site: Site) -> None:
    seen: list[AuditRecord] = []
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"first": True})
        record = append_record(
            site=site,
            kind=AuditKind.SETTLEMENT,
            body={"second": True},
            before_lock=seen.append,
            rehashed=lambda r: pytest.fail("nothing raced this append"),
        )
    assert seen == [record]
    assert AuditRecord.objects.get(site=site, seq=2).hash == record.hash


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_append_that_lost_the_head_is_built_again_on_the_winner(site: Site) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks (SQLite serialises the writers instead)")
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"first": True})
    built: list[AuditRecord] = []
    rebuilt: list[AuditRecord] = []
    errors: list[BaseException] = []

    def another_append_commits(record: AuditRecord) -> None:
        built.append(record)

        def other() -> None:
            try:
                with transaction.atomic():
                    append_record(site=site, kind=AuditKind.SETTLEMENT, body={"other": True})
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                connection.close()

        # Runs to COMMIT while this transaction is open with its record signed, unlocked.
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the other append waited for this transaction"

    with transaction.atomic():
        record = append_record(
            site=site,
            kind=AuditKind.SETTLEMENT,
            body={"mine": True},
            before_lock=another_append_commits,
            rehashed=rebuilt.append,
        )

    assert not errors, errors
    assert [r.seq for r in built] == [2]
    assert rebuilt == [record] and record.seq == 3 and record.hash != built[0].hash
    records = list(records_for(site))
    assert [r.seq for r in records] == [1, 2, 3]
    assert json.loads(records[1].payload)["body"] == {"other": True}
    assert json.loads(records[2].payload)["body"] == {"mine": True}
    result = chain_verification(site)
    assert result.ok and result.count == 3, result
