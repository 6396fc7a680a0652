"""Which unique constraint an IntegrityError reports, on the database the tests run on."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

from refunds.models import Mandate
from sill.accounts.models import Agent, Site
from sill.constraints import violated
from sill.orders.models import Order

pytestmark = pytest.mark.django_db

MANDATE_CONSTRAINTS = ("mandate_id_unique", "mandate_nonce_unique")


def _refused(write) -> IntegrityError:
    with pytest.raises(IntegrityError) as info, transaction.atomic():
        write()
    return info.value


def _mandate(site: Site, agent: Agent, **fields) -> Mandate:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    return Mandate.objects.create(**{
        "site": site, "agent": agent, "mandate_id": "mnd_1", "key_id": "k1", "nonce": "n-1",
        "action": "request_refund", "raw": b"{}", "body_sha256": "0" * 64, "issued_at": at,
        "expires_at": at, **fields,
    })  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "name"),
    [({"nonce": "n-2"}, "mandate_id_unique"), ({"mandate_id": "mnd_2"}, "mandate_nonce_unique")],
)
def test_it_names_the_constraint_a_write_broke_and_no_other(site, agent, fields, name) -> None:
    _mandate(site, agent)
    exc = _refused(lambda: _mandate(site, agent, **fields))
    assert {c: violated(exc, Mandate, c) for c in MANDATE_CONSTRAINTS} == {
        c: c == name for c in MANDATE_CONSTRAINTS
    }
    assert not violated(exc, Order, "order_source_mandate_unique")


def test_it_names_a_conditional_unique_constraint(site, make_order) -> None:
    make_order(source_mandate_id="mnd_1")
    exc = _refused(lambda: make_order(source_mandate_id="mnd_1"))
    assert violated(exc, Order, "order_source_mandate_unique")
    assert not violated(exc, Order, "order_number_unique")
    assert not any(violated(exc, Mandate, c) for c in MANDATE_CONSTRAINTS)


def test_it_refuses_a_name_the_model_has_no_unique_constraint_of(site, agent) -> None:
    _mandate(site, agent)
    exc = _refused(lambda: _mandate(site, agent))
    with pytest.raises(LookupError):
        violated(exc, Mandate, "mandate_nonce_unqiue")
