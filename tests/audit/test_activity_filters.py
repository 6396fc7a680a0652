"""Activity's filters (kind, refund id, days in the site's zone) and their exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import transaction

from audit.models import AuditRecord
from audit.services import append_record

pytestmark = pytest.mark.django_db


def _append(site, kind: str, **body) -> None:
    with transaction.atomic():
        append_record(site=site, kind=kind, body=body)


def _refunds_shown(client, **query) -> list[str]:
    body = client.get("/activity/", query).content.decode()
    if "<tbody>" not in body:
        return []
    rows = body.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [part.split("/", 1)[0] for part in rows.split('href="/refunds/')[1:]]


@pytest.fixture
def log(site, other_site):
    """Records on two days (in New York time), of three kinds, about three refunds."""
    site.timezone = "America/New_York"
    site.save(update_fields=["timezone"])
    # 03:30 UTC on Dec 2 is still Dec 1 in New York.
    with time_machine.travel(datetime(2026, 12, 2, 3, 30, tzinfo=UTC), tick=False):
        _append(site, "approved", refund_id="rf_one", amount_minor=8900, currency="USD")
        _append(site, "settlement", refund_id="rf_one", amount_minor=8900, currency="USD")
    with time_machine.travel(datetime(2026, 12, 2, 15, 0, tzinfo=UTC), tick=False):
        _append(site, "escalated", refund_id="rf_two", amount_minor=500, currency="USD")
        _append(site, "rejected", refund_id="rf_three", amount_minor=100, currency="USD")
    _append(other_site, "approved", refund_id="rf_one", amount_minor=1, currency="USD")


def test_it_filters_by_kind(client_for, log):
    assert _refunds_shown(client_for("owner"), kind="settlement") == ["rf_one"]


def test_an_unknown_kind_is_ignored(client_for, log):
    assert len(_refunds_shown(client_for("owner"), kind="nope")) == 4


def test_it_filters_by_refund_id_exactly(client_for, log):
    assert _refunds_shown(client_for("owner"), refund="rf_one") == ["rf_one", "rf_one"]
    assert _refunds_shown(client_for("owner"), refund="rf_on") == []  # no substring match


def test_days_are_whole_days_in_the_sites_time_zone(client_for, log):
    client = client_for("owner")
    dec1 = _refunds_shown(client, **{"from": "2026-12-01", "to": "2026-12-01"})
    assert dec1 == ["rf_one", "rf_one"]
    assert _refunds_shown(client, **{"from": "2026-12-02"}) == ["rf_three", "rf_two"]
    assert _refunds_shown(client, to="2026-11-30") == []
    assert len(_refunds_shown(client, **{"from": "not a date"})) == 4


def test_the_last_day_of_the_calendar_is_a_day_like_any_other(client_for, log):
    # Its end (the next midnight) is past what a datetime holds: it was a 500.
    client = client_for("reviewer")
    assert len(_refunds_shown(client, to="9999-12-31")) == 4
    assert _refunds_shown(client, **{"from": "9999-12-31"}) == []
    assert client.get("/activity/", {"to": "9999-12-31", "format": "csv"}).status_code == 200


def test_filters_combine_and_the_form_keeps_them(client_for, log):
    client = client_for("owner")
    assert _refunds_shown(client, kind="escalated", **{"from": "2026-12-02"}) == ["rf_two"]
    body = client.get("/activity/", {"kind": "escalated", "refund": "rf_two"}).content.decode()
    assert 'value="rf_two"' in body and '<option value="escalated" selected>' in body
    assert "format=jsonl" in body and "kind=escalated&amp;refund=rf_two&amp;format=csv" in body


def test_an_empty_result_says_so_and_offers_to_clear(client_for, log):
    body = client_for("owner").get("/activity/", {"refund": "rf_none"}).content.decode()
    assert "No records match these filters" in body and "Clear the filters" in body


def test_pages_keep_the_filters(client_for, site):
    with transaction.atomic():
        for n in range(55):
            append_record(site=site, kind="approved", body={"refund_id": f"rf_{n}"})
    body = client_for("owner").get("/activity/", {"kind": "approved"}).content.decode()
    assert 'href="?kind=approved&amp;page=2"' in body


# --- exports -------------------------------------------------------------------------------------


def test_the_jsonl_export_is_the_stored_records_under_the_filters(client_for, site, log):
    response = client_for("reviewer").get("/activity/", {"refund": "rf_one", "format": "jsonl"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/jsonl")
    assert "attachment" in response["Content-Disposition"]
    lines = b"".join(response.streaming_content).decode().splitlines()
    exported = [json.loads(line) for line in lines]
    stored = AuditRecord.objects.filter(site=site, subject_refund_id="rf_one").order_by("seq")
    assert exported == [
        {
            "seq": r.seq,
            "kind": r.kind,
            "payload": r.payload,
            "prev_hash": r.prev_hash,
            "hash": r.hash,
            "signature": r.signature,
            "key_id": r.key_id,
        }
        for r in stored
    ]


def _csv(response) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_csv_export_has_times_in_the_sites_zone_and_order_numbers(
    client_for, site, make_order, log
):
    order = make_order()
    _append(site, "approved", refund_id="rf_four", order_id=order.pk, agent_id="agent_x",
            amount_minor=1250, currency="USD")  # fmt: skip
    rows = _csv(client_for("owner").get("/activity/", {"format": "csv"}))
    assert rows[0] == [
        "seq", "time", "kind", "refund", "order", "amount", "currency", "actor", "detail"
    ]  # fmt: skip
    assert rows[1][0] == "1" and rows[1][1] == "2026-12-01T22:30:00-05:00"
    assert rows[1][2:] == ["Approved", "rf_one", "", "89.00", "USD", "Sill", ""]
    assert rows[-1][2:] == ["Approved", "rf_four", str(order.number), "12.50", "USD", "agent_x", ""]
    assert len(rows) == 6  # header + this site's five records, not the other site's


def test_a_zero_amount_reads_0_in_its_currency_like_any_other(client_for, site):
    # Seen: a zero-amount record's amount and currency cells were empty (and "—" on the page),
    # as if the record named no money at all: a zero Money is falsy.
    _append(site, "rejected", refund_id="rf_zero", amount_minor=0, currency="USD",
            reason="exceeds_refundable")  # fmt: skip
    _append(site, "rejected", refund_id="rf_yen", amount_minor=0, currency="JPY")
    _append(site, "member_change", action="add", member="ann@example.com", role="staff")
    client = client_for("owner")
    rows = _csv(client.get("/activity/", {"format": "csv"}))
    assert [row[5:7] for row in rows[1:]] == [["0.00", "USD"], ["0", "JPY"], ["", ""]]
    # The last column says in words what the page says beside the kind or the refund: a
    # reason in the refund pages' words, not its code humanized ("Exceeds refundable").
    assert [row[8] for row in rows[1:]] == [
        "More than is still refundable",
        "",
        "ann@example.com: added as staff",
    ]
    body = client.get("/activity/").content.decode()
    assert "$0.00" in body and "¥0" in body
    assert "More than is still refundable" in body and "Exceeds refundable" not in body


def test_a_refund_the_rail_made_beyond_sills_books_reads_in_words(client_for, site):
    """Seen: Activity said "Exceeds charge at rail" under a refund needing attention (and
    "Rejected by reviewer", "Shopify unauthorized"), where its page says the words."""
    _append(site, "needs_attention", refund_id="rf_over", amount_minor=2400, currency="USD",
            reason="exceeds_charge_at_rail")  # fmt: skip
    body = client_for("owner").get("/activity/").content.decode()
    assert "Refunded at the rail beyond what Sill&#x27;s books allow" in body
    assert "Exceeds charge at rail" not in body


def test_the_csv_names_an_agent_by_its_name_with_its_id_as_the_page_does(client_for, site, agent):
    # Seen: the actor cell was "agent_test_shopper" where the page says "Test shopper" above
    # the id: the CSV an owner hands a buyer named the agent by a code.
    _append(site, "approved", refund_id="rf_a", agent_id=agent.agent_id, amount_minor=500,
            currency="USD")  # fmt: skip
    _append(site, "rejected", refund_id="rf_b", agent_id="agent_since_removed")
    rows = _csv(client_for("owner").get("/activity/", {"format": "csv"}))
    assert [row[7] for row in rows[1:]] == [
        "Test shopper (agent_test_shopper)",
        "agent_since_removed",  # no longer on the site: the id its record names
    ]
    # A name an admin typed is a cell like any other.
    agent.name = '=HYPERLINK("http://x")'
    agent.save(update_fields=["name"])
    rows = _csv(client_for("owner").get("/activity/", {"format": "csv"}))
    assert rows[1][7] == '\'=HYPERLINK("http://x") (agent_test_shopper)'


def test_the_csv_export_is_safe_from_formula_injection(client_for, site):
    for evil in ('=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "\tx", "\rx"):
        _append(site, "approved", refund_id="rf_x", agent_id=evil)
    rows = _csv(client_for("owner").get("/activity/", {"format": "csv"}))
    actors = [row[7] for row in rows[1:]]
    assert actors == ['\'=HYPERLINK("http://x")', "'+1", "'-2", "'@SUM(A1)", "'\tx", "'\rx"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_exports_are_gated_like_the_page(client_for, fmt):
    assert client_for("staff").get("/activity/", {"format": fmt}).status_code == 403
    assert client_for("anonymous").get("/activity/", {"format": fmt}).status_code == 302


def test_the_first_day_of_the_calendar_east_of_utc_is_a_day_like_any_other(client_for, log, site):
    # Its midnight in Tokyo is still year 0 in UTC: the database's conversion overflowed (500).
    site.timezone = "Asia/Tokyo"
    site.save()
    client = client_for("reviewer")
    assert len(_refunds_shown(client, **{"from": "0001-01-01"})) == 4
    assert _refunds_shown(client, to="0001-01-01") == []
    csv = client.get("/activity/", {"from": "0001-01-01", "format": "csv"})
    assert csv.status_code == 200
