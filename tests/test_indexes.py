"""The foreign keys whose index of their own was dropped (refunds 0018, audit 0011) are still
the first column of another index, so lookups and deletions by them stay indexed."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

pytestmark = pytest.mark.django_db

LED_BY_COMPOSITES = [
    ("refunds", "mandate", "site"),
    ("refunds", "mandate", "agent"),
    ("refunds", "refund", "site"),
    ("refunds", "refund", "agent"),
    ("audit", "auditrecord", "site"),
    ("audit", "audittreenode", "site"),
]


@pytest.mark.parametrize(("app", "model_name", "field_name"), LED_BY_COMPOSITES)
def test_each_key_leads_an_index_and_has_none_alone(app, model_name, field_name) -> None:
    model = apps.get_model(app, model_name)
    column = model._meta.get_field(field_name).column
    with connection.cursor() as cursor:
        indexes = [
            info
            for info in connection.introspection.get_constraints(
                cursor, model._meta.db_table
            ).values()
            if info["index"] or info["unique"]
        ]
    assert not [i for i in indexes if i["columns"] == [column] and not i["unique"]]
    assert [i for i in indexes if i["columns"][:1] == [column] and len(i["columns"]) > 1]
