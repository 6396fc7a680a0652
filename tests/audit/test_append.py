"""Appending records: a valid chain per site, inside the caller's transaction only."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import transaction

from audit import chain, keys
from audit.models import AuditKind, AuditRecord
from audit.selectors import chain_verification, record_by_hash, records_for
from audit.services import AuditOutsideTransaction, append_record
from sill.accounts.models import Site

pytestmark = pytest.mark.django_db


def append(site: Site, kind: str = AuditKind.SETTLEMENT, **body: object) -> AuditRecord:
    with transaction.atomic():
        return append_record(site=site, kind=kind, body=body or {"amount_minor": 8900})


def test_it_builds_a_valid_chain(site: Site) -> None:
    first = append(site, AuditKind.ESCALATED, refund_id="rf_1", rules=["r1"])
    second = append(site, AuditKind.ESCALATED_APPROVED, refund_id="rf_1")
    third = append(site, AuditKind.SETTLEMENT, refund_id="rf_1", decision_hash=second.hash)

    assert [r.seq for r in records_for(site)] == [1, 2, 3]
    assert first.prev_hash == chain.GENESIS_HASH
    assert second.prev_hash == first.hash
    assert third.prev_hash == second.hash
    assert third.hash == chain.record_hash(second.hash, third.payload.encode())
    assert len(third.signature) == 86
    assert third.key_id == keys.signing_key()[0]

    payload = json.loads(second.payload)
    assert payload["site_id"] == site.pk
    assert payload["seq"] == 2
    assert payload["kind"] == "escalated_approved"
    assert payload["body"] == {"refund_id": "rf_1", "decision": "escalated_approved"}
    assert payload["recorded_at"].endswith("Z") and len(payload["recorded_at"]) == 24
    assert chain.canonical(payload).decode() == second.payload

    assert chain_verification(site).ok
    assert record_by_hash(site, second.hash) == second
    assert [r.seq for r in records_for(site, kind=AuditKind.SETTLEMENT)] == [3]


def test_it_keeps_independent_chains_per_site(site: Site, other_site: Site) -> None:
    a1 = append(site)
    b1 = append(other_site)
    a2 = append(site)
    b2 = append(other_site)

    assert (a1.seq, a2.seq, b1.seq, b2.seq) == (1, 2, 1, 2)
    assert b1.prev_hash == chain.GENESIS_HASH
    assert b2.prev_hash == b1.hash
    assert record_by_hash(other_site, a1.hash) is None

    out = io.StringIO()
    call_command("audit", "verify", stdout=out)
    assert f"site {site.pk}: 2 records OK" in out.getvalue()
    assert f"site {other_site.pk}: 2 records OK" in out.getvalue()


def test_it_verifies_an_empty_site(site: Site) -> None:
    out = io.StringIO()
    call_command("audit", "verify", "--site", site.pk, stdout=out)
    assert out.getvalue().strip() == f"site {site.pk}: 0 records OK"


@pytest.mark.parametrize("bad", [1.5, Decimal("89.00"), {"nested": [0.1]}, b"raw"])
def test_it_refuses_inexact_values(site: Site, bad: object) -> None:
    with pytest.raises(TypeError), transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"amount": bad})
    assert not AuditRecord.objects.exists()


def test_it_refuses_integers_json_cannot_hold(site: Site) -> None:
    with pytest.raises(ValueError), transaction.atomic():
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={"amount_minor": 2**53})


def test_it_refuses_an_unknown_kind(site: Site) -> None:
    with pytest.raises(ValueError), transaction.atomic():
        append_record(site=site, kind="refunded_twice", body={})


def test_it_keeps_a_callers_decision(site: Site) -> None:
    record = append(site, AuditKind.REJECTED, decision="rejected", reason="policy_denied")
    assert json.loads(record.payload)["body"]["decision"] == "rejected"


def test_it_refuses_update_and_delete(site: Site) -> None:
    record = append(site)

    record.kind = AuditKind.DISPUTE
    with pytest.raises(Exception, match="append-only"):
        record.save()
    with pytest.raises(Exception, match="append-only"):
        record.delete()
    with pytest.raises(Exception, match="append-only"):
        AuditRecord.objects.filter(pk=record.pk).update(kind=AuditKind.DISPUTE)
    with pytest.raises(Exception, match="append-only"):
        AuditRecord.objects.filter(pk=record.pk).delete()

    record.refresh_from_db()
    assert record.kind == AuditKind.SETTLEMENT
    assert chain_verification(site).ok


def test_it_is_not_in_the_admin() -> None:
    from django.contrib import admin

    assert not admin.site.is_registered(AuditRecord)


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_append_outside_a_transaction(site: Site) -> None:
    with pytest.raises(AuditOutsideTransaction):
        append_record(site=site, kind=AuditKind.SETTLEMENT, body={})
    assert not AuditRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_rolls_back_with_the_caller_and_leaves_no_gap(site: Site) -> None:
    append(site)
    append(site)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        rolled_back = append_record(site=site, kind=AuditKind.APPROVED, body={"refund_id": "x"})
        assert rolled_back.seq == 3
        raise Boom

    assert [r.seq for r in records_for(site)] == [1, 2]
    assert append(site).seq == 3
    assert chain_verification(site).ok
