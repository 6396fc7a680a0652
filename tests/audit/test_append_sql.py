"""An append writes its record and tree nodes with hand-written SQL (issue 18): every column,
stored as the ORM would store it, and the returned record reads as saved."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

from audit import services
from audit.models import AuditKind, AuditRecord, AuditTreeNode
from audit.services import append_record
from sill.accounts.models import Site


def _columns(sql: str) -> set[str]:
    match = re.search(r"\(([^)]*)\)", sql)
    assert match is not None
    return {name.strip().strip('"') for name in match.group(1).split(",")}


@pytest.mark.parametrize(
    ("sql", "model"),
    [(services._INSERT_RECORD, AuditRecord), (services._INSERT_TREE_NODES, AuditTreeNode)],
)
def test_it_inserts_every_column_but_the_id(sql: str, model: type) -> None:
    assert _columns(sql) == {f.column for f in model._meta.concrete_fields if not f.primary_key}


@pytest.mark.django_db
def test_the_returned_record_is_the_stored_one(site: Site) -> None:
    with transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"first": True})
        record = append_record(
            site=site,
            kind=AuditKind.APPROVED,
            body={"refund_id": "rf_1", "order_id": "ord_1", "amount_minor": 8900},
        )

    assert not record._state.adding
    assert record._state.db == "default"
    stored = AuditRecord.objects.get(pk=record.pk)
    for field in AuditRecord._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(record, field.attname), field.name
    assert stored.created_at.microsecond % 1000 == 0
    assert stored.subject_refund_id == "rf_1"


@pytest.mark.django_db
def test_it_stores_every_node_the_record_completes(site: Site) -> None:
    with transaction.atomic():
        for n in range(4):
            append_record(site=site, kind=AuditKind.SETTLEMENT, body={"n": n})

    stored = set(AuditTreeNode.objects.filter(site=site).values_list("level", "index"))
    # Four leaves complete two pairs and the root of all four.
    assert stored == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0)}
