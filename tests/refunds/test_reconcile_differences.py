"""The pure comparison of one charge's books with the rail's list (no database)."""

from __future__ import annotations

from datetime import UTC, datetime

from refunds.reconcile.differences import OutsideRow, SillRefundRow, differences
from sill.rails.base import RailRefund

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def rail_refund(
    pid: str, amount: int = 2000, status: str = "succeeded", sill: str = ""
) -> RailRefund:
    return RailRefund(
        provider_refund_id=pid,
        amount_minor=amount,
        currency="USD",
        status=status,
        created_at=NOW,
        sill_refund_id=sill,
    )


def own(rid: str, pid: str, status: str = "succeeded", amount: int = 2000) -> SillRefundRow:
    return SillRefundRow(
        refund_id=rid, provider_refund_id=pid, status=status, amount_minor=amount, currency="USD"
    )


def outside(pid: str, amount: int = 2000, status: str = "succeeded") -> OutsideRow:
    return OutsideRow(provider_refund_id=pid, amount_minor=amount, currency="USD", status=status)


def compare(listed=(), sill=(), before=None, after=None):
    return differences(
        rail="stripe",
        currency="USD",
        listed=list(listed),
        sill=list(sill),
        outside_before=before or {},
        outside_after=after if after is not None else (before or {}),
    )


def test_it_finds_nothing_when_the_books_agree():
    listed = [rail_refund("re_1", sill="rf_1"), rail_refund("re_2")]
    assert compare(listed, [own("rf_1", "re_1")], before={"re_2": outside("re_2")}) == []


def test_it_reports_an_outside_refund_sill_had_missed_as_corrected_once_recorded():
    [found] = compare([rail_refund("re_out")], before={}, after={"re_out": outside("re_out")})
    assert (found.kind, found.key, found.sill_corrected) == (
        "missing_in_sill",
        "missing_in_sill:re_out",
        True,
    )
    assert found.rail_amount_minor == 2000 and found.sill_amount_minor is None
    assert "had not recorded it" in found.detail


def test_it_ignores_an_outside_refund_that_failed_and_was_never_recorded():
    assert compare([rail_refund("re_out", status="failed")]) == []


def test_it_reports_a_settled_refund_the_rail_does_not_list():
    [found] = compare([], [own("rf_1", "re_gone")])
    assert (found.kind, found.key, found.refund_id) == (
        "missing_at_rail",
        "missing_at_rail:rf_1",
        "rf_1",
    )
    assert not found.sill_corrected


def test_it_reports_amounts_that_differ_for_sills_and_outside_refunds():
    listed = [rail_refund("re_1", amount=2000, sill="rf_1"), rail_refund("re_2", amount=900)]
    found = compare(
        listed, [own("rf_1", "re_1", amount=2500)], before={"re_2": outside("re_2", 1000)}
    )
    assert sorted(d.key for d in found) == ["amount_differs:re_2", "amount_differs:rf_1"]
    mine = next(d for d in found if d.refund_id)
    assert (mine.sill_amount_minor, mine.rail_amount_minor) == (2500, 2000)
    assert "$25.00" in mine.detail and "$20.00" in mine.detail


def test_it_reports_status_differences_both_ways():
    listed = [
        rail_refund("re_a", status="canceled", sill="rf_a"),
        rail_refund("re_b", status="pending", sill="rf_b"),
        rail_refund("re_c", status="succeeded", sill="rf_c"),
    ]
    sill = [own("rf_a", "re_a"), own("rf_b", "re_b"), own("rf_c", "", status="failed")]
    found = {d.key: d for d in compare(listed, sill)}
    assert set(found) == {"status_differs:rf_a", "status_differs:rf_b", "status_differs:rf_c"}
    assert "refunded twice" in found["status_differs:rf_c"].detail
    assert "has not finished" in found["status_differs:rf_b"].detail


def test_it_leaves_refunds_being_executed_or_needing_attention_to_their_execution():
    sill = [own("rf_p", "", status="processing"), own("rf_n", "", status="needs_attention")]
    assert compare([rail_refund("re_p", sill="rf_p")], sill) == []


def test_it_reports_a_rail_refund_naming_a_sill_refund_sill_does_not_have():
    [found] = compare([rail_refund("re_x", sill="rf_unknown")])
    assert (found.kind, found.key) == ("missing_in_sill", "missing_in_sill:re_x")
    assert "rf_unknown" in found.detail


def test_it_reports_a_recorded_outside_refund_the_rail_no_longer_lists():
    [found] = compare([], before={"re_old": outside("re_old")})
    assert (found.kind, found.key, found.sill_amount_minor) == (
        "missing_at_rail",
        "missing_at_rail:re_old",
        2000,
    )


def test_it_names_the_pair_when_sill_settled_another_provider_id_for_the_key():
    [found] = compare([rail_refund("re_real", sill="rf_1")], [own("rf_1", "re_typo")])
    assert found.kind == "missing_at_rail" and "re_real" in found.detail


def test_it_reports_a_second_rail_refund_naming_a_sill_refund_counted_under_another_id():
    # An owner recorded a refund that needed attention under a dashboard refund's id (re_dash,
    # made by hand, no metadata); Sill's own attempt had made re_own meanwhile. Stripe has
    # refunded twice, Sill counts once. Seen before: re_own was passed over because Sill has
    # rf_1, so the run found the books in order.
    listed = [rail_refund("re_dash"), rail_refund("re_own", sill="rf_1")]
    [found] = compare(listed, [own("rf_1", "re_dash")])
    assert (found.kind, found.key, found.rail_amount_minor) == (
        "missing_in_sill",
        "missing_in_sill:re_own",
        2000,
    )
    assert "rf_1" in found.detail and "re_dash" in found.detail


def test_it_leaves_a_failed_second_rail_refund_naming_a_sill_refund_alone():
    listed = [rail_refund("re_1", sill="rf_1"), rail_refund("re_2", status="failed", sill="rf_1")]
    assert compare(listed, [own("rf_1", "re_1")]) == []


def test_an_outside_refund_the_sync_failed_to_save_is_not_said_to_exceed_the_charge():
    # Seen before: every outside refund the sync did not record read "with the refunds Sill
    # counts it would exceed the charge", also one whose save failed on a database error
    # (sill.rails.charge_sync's refunds_not_recorded): a reason Sill did not have.
    listed = [rail_refund("re_failed"), rail_refund("re_no_room")]
    failed, no_room = differences(
        rail="stripe",
        currency="USD",
        listed=listed,
        sill=[],
        outside_before={},
        outside_after={},
        not_recorded={"re_failed"},
    )
    assert "saving it failed; the worker's log names the error" in failed.detail
    assert "exceed" not in failed.detail
    assert "it would exceed the charge" in no_room.detail
