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
from django.test.utils import CaptureQueriesContext

from audit import chain
from audit.models import AuditKind, AuditRecord
from audit.selectors import chain_verification, records_for
from audit.services import append_record
from sill import sql
from sill.accounts.models import Site

BODIES = [
    {"refund_id": "rf_1", "amount_minor": 8900, "currency": "USD"},
    {"note": 'café ☕ \u2028 "quoted" \\ \n\t\x01', "nested": {"z": [1, None, True], "a": {}}},
    {"€": 1, "a": -(2**53 - 1), "🙂": "x", "list": [[], [{}], "é"]},
    {},
]


@pytest.fixture
def chained(site: Site) -> None:
    """On PostgreSQL, ``site`` with one record on its chain (so its head exists, to be read
    unlocked); skipped elsewhere: these need PostgreSQL's row locks (SQLite serialises the
    writers instead)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks (SQLite serialises the writers instead)")
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"first": True})


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
def test_an_append_that_lost_the_head_is_built_again_on_the_winner(
    site: Site, chained: None
) -> None:
    built: list[AuditRecord] = []
    rebuilt: list[AuditRecord] = []
    errors: list[BaseException] = []

    def another_append_commits(record: AuditRecord) -> None:
        built.append(record)
        # Runs to COMMIT while this transaction is open with its record signed, unlocked.
        _commit_another_append(site, errors)

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


def _commit_another_append(site: Site, errors: list[BaseException]) -> None:
    """Another append of ``site``, run to COMMIT on a connection of its own."""

    def other() -> None:
        try:
            with transaction.atomic():
                append_record(site=site, kind=AuditKind.SETTLEMENT, body={"other": True})
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the other append waited for this transaction"


@pytest.mark.django_db
def test_writes_go_with_the_append_carrying_its_record(site: Site) -> None:
    """The caller's writes run once, with the record they were given."""
    asked: list[AuditRecord] = []

    def writes(record: AuditRecord) -> list[sql.Write]:
        asked.append(record)
        return [sql.update_write("accounts_site", '"name" = %s', [record.hash[:40]], pk=site.pk)]

    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"first": True})
        before = len(captured)
        record = append_record(
            site=site, kind=AuditKind.SETTLEMENT, body={"second": True}, writes=writes
        )
        appended = len(captured) - before
    assert asked == [record]
    site.refresh_from_db()
    assert site.name == record.hash[:40]
    # The head read, then one statement for everything on PostgreSQL; SQLite: the head
    # UPDATE, the write, the record and tree INSERTs.
    assert appended == (2 if connection.vendor == "postgresql" else 5)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_writes_of_an_append_that_lost_the_head_are_not_written_and_asked_again(
    site: Site, chained: None
) -> None:
    asked: list[AuditRecord] = []
    errors: list[BaseException] = []
    original_name = site.name

    def writes(record: AuditRecord) -> list[sql.Write]:
        asked.append(record)
        if len(asked) == 1:
            # Another append moves the head after this record was built on the old one.
            _commit_another_append(site, errors)
        return [
            sql.update_write(
                "accounts_site", '"name" = "name" || %s', [f" {record.seq}"], pk=site.pk
            )
        ]

    with transaction.atomic():
        record = append_record(
            site=site, kind=AuditKind.SETTLEMENT, body={"mine": True}, writes=writes
        )

    assert not errors, errors
    assert [r.seq for r in asked] == [2, 3] and asked[1] is record
    site.refresh_from_db()
    assert site.name == f"{original_name} 3"  # the lost attempt wrote nothing
    assert [r.seq for r in records_for(site)] == [1, 2, 3]
    assert chain_verification(site).ok


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_lost_races_are_built_again_without_the_head_lock_then_with_it(
    site: Site, chained: None
) -> None:
    """Every unlocked attempt loses here: the append ends on the locked path, and nothing it
    tried before was written."""
    from audit.services import _UNLOCKED_ATTEMPTS

    asked: list[AuditRecord] = []
    errors: list[BaseException] = []

    def writes(record: AuditRecord) -> list[sql.Write]:
        asked.append(record)
        if len(asked) <= _UNLOCKED_ATTEMPTS:
            _commit_another_append(site, errors)
        return [sql.update_write("accounts_site", '"name" = %s', [f"seq {record.seq}"], pk=site.pk)]

    with transaction.atomic():
        record = append_record(
            site=site, kind=AuditKind.SETTLEMENT, body={"mine": True}, writes=writes
        )
    assert not errors, errors
    assert len(asked) == _UNLOCKED_ATTEMPTS + 1 and asked[-1] is record
    assert record.seq == 2 + _UNLOCKED_ATTEMPTS
    site.refresh_from_db()
    assert site.name == f"seq {record.seq}"
    assert chain_verification(site).ok
