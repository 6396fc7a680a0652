from __future__ import annotations

import json
import logging

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit import chain, keys
from audit.models import AuditVerification
from audit.services import append_record
from sill.accounts.access import SESSION_SITE_KEY
from tests.audit.test_tamper import NESTED_PAST_THE_RECURSION_LIMIT, set_column

pytestmark = pytest.mark.django_db


def _record(site, n: int = 1) -> None:
    with transaction.atomic():
        for i in range(n):
            append_record(
                site=site,
                kind="approved",
                body={
                    "refund_id": f"rf_{i}",
                    "amount_minor": 8900,
                    "currency": "USD",
                    "order_id": None,
                },
            )


@pytest.mark.parametrize(
    ("persona", "status"),
    [
        ("owner", 200),
        ("admin", 200),
        ("reviewer", 200),
        ("staff", 403),
        ("outsider", 200),
        ("anonymous", 302),
    ],
)
def test_it_gates_the_activity_page_by_role(client_for, persona, status):
    assert client_for(persona).get("/activity/").status_code == status


def test_it_lists_only_this_sites_records_with_money_formatted(client_for, site, other_site):
    _record(site)
    with transaction.atomic():
        append_record(site=other_site, kind="rejected", body={"refund_id": "rf_theirs"})
    body = client_for("reviewer").get("/activity/").content.decode()
    assert "rf_0" in body and "$89.00" in body
    assert "rf_theirs" not in body


def test_it_verifies_the_chain_in_the_background_on_demand(
    client_for, site, django_capture_on_commit_callbacks
):
    _record(site, 3)
    client = client_for("reviewer")
    # A page request never verifies: it shows the latest check, here none.
    assert "Chain verified" not in client.get("/activity/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):  # the worker, eagerly
        answer = client.post("/activity/verify/")
    assert answer.status_code == 302
    body = client.get("/activity/").content.decode()
    assert "Chain verified" in body and "3 records" in body


def test_a_running_check_shows_its_progress_and_polls(client_for, site):
    _record(site, 2)
    client = client_for("owner")
    client.post("/activity/verify/")  # not committed to a worker in this test: still running
    part = client.get("/activity/", {"part": "verification"}).content.decode()
    assert "0 of 2 records checked" in part and 'hx-trigger="every 2s"' in part
    client.post("/activity/verify/")  # asking again joins the running one
    assert AuditVerification.objects.filter(site=site).count() == 1


def test_a_broken_chain_is_reported(client_for, site, django_capture_on_commit_callbacks):
    from django.db import connection as conn

    _record(site, 3)
    with conn.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_auditrecord SET payload = replace(payload, '8900', '8901') "
            "WHERE site_id = %s AND seq = 2",
            [site.pk],
        )
    with django_capture_on_commit_callbacks(execute=True):
        client_for("owner").post("/activity/verify/")
    body = client_for("owner").get("/activity/").content.decode()
    assert "Chain broken at seq 2" in body


def test_a_payload_nested_past_the_recursion_limit_is_reported_at_its_seq(
    client_for, site, django_capture_on_commit_callbacks
):
    _record(site, 3)
    set_column(site, 2, "payload", NESTED_PAST_THE_RECURSION_LIMIT)
    with django_capture_on_commit_callbacks(execute=True):
        client_for("owner").post("/activity/verify/")
    answer = client_for("owner").get("/activity/")  # the record is listed too, without a body
    assert answer.status_code == 200
    assert "Chain broken at seq 2" in answer.content.decode()
    assert "payload is nested too deeply to parse" in answer.content.decode()


def test_a_check_that_raises_ends_broken_instead_of_running(
    client_for, site, django_capture_on_commit_callbacks, caplog, settings, tmp_path
):
    _record(site, 2)
    # A legacy key list nobody can read: the check cannot even list the keys. (A key row
    # nobody can read no longer does it: an unendorsed row is ignored.)
    settings.SILL_AUDIT_SIGNING_KEY = chain.b64url_encode(keys.configured_key()[1].encode())
    settings.SILL_DATA_DIR = tmp_path
    (tmp_path / keys.PUBLIC_KEYS_FILE).write_text('{"sill-0000000000000000": "not base64url!"}')
    with (
        caplog.at_level(logging.ERROR, logger="audit.verification"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        client_for("owner").post("/activity/verify/")
    verification = AuditVerification.objects.get(site=site)
    assert verification.status == AuditVerification.Status.FAILED
    assert verification.finished_at is not None
    assert verification.problem == (
        "the check could not finish (ImproperlyConfigured); see the worker's log"
    )
    assert "Chain broken (checked" in client_for("owner").get("/activity/").content.decode()
    assert any(r.exc_info for r in caplog.records), "the exception was not logged"


def test_staff_cannot_start_a_check(client_for):
    assert client_for("staff").post("/activity/verify/").status_code == 403


def test_a_member_of_another_site_neither_reads_nor_starts_this_sites_check(
    client_for, site, other_site
):
    """The check is the current site's, and only a member's site can be current: no id in a
    URL, and a session naming another site falls back to the member's own."""
    _record(site, 2)
    client_for("owner").post("/activity/verify/")  # not sent to a worker here: still running
    ours = AuditVerification.objects.get(site=site)
    outsider = client_for("outsider")  # an owner of the other site
    session = outsider.session
    session[SESSION_SITE_KEY] = site.pk  # as if they had picked this site
    session.save()
    for answer in (
        outsider.get("/activity/", {"part": "verification"}),
        outsider.get("/activity/"),
        outsider.post("/activity/verify/", HTTP_HX_REQUEST="true"),
    ):
        assert answer.status_code == 200
        assert "of 2 records checked" not in answer.content.decode()
    # Their POST started their own site's check, and left this one as it was.
    assert AuditVerification.objects.filter(site=other_site).count() == 1
    assert list(AuditVerification.objects.filter(site=site)) == [ours]
    assert AuditVerification.objects.get(pk=ours.pk).started_at == ours.started_at
    # A reviewer of this site reads it.
    part = client_for("reviewer").get("/activity/", {"part": "verification"}).content.decode()
    assert "0 of 2 records checked" in part and "by owner@roasters.example" in part


def test_it_shows_an_empty_state(client_for):
    assert "No activity yet" in client_for("owner").get("/activity/").content.decode()


def test_it_runs_the_same_number_of_queries_for_2_and_20_records(client_for, site):
    client = client_for("owner")
    _record(site, 2)
    with CaptureQueriesContext(connection) as few:
        client.get("/activity/")
    _record(site, 18)
    with CaptureQueriesContext(connection) as many:
        client.get("/activity/")
    assert len(few.captured_queries) == len(many.captured_queries)


@pytest.mark.parametrize("field", ["refund_id", "order_id"])
def test_a_tampered_id_no_link_can_hold_is_listed_not_a_500(client_for, site, field):
    # A payload edited in the database: `audit verify` reports it; the page still lists it.
    _record(site, 2)
    set_column(
        site,
        2,
        "payload",
        json.dumps(
            {
                "body": {field: "x/../y"},
                "kind": "approved",
                "recorded_at": "2026-12-01T00:00:00.000Z",
                "seq": 2,
                "site_id": site.pk,
            },
            sort_keys=True,
            separators=(",", ":"),
        ),
    )
    answer = client_for("owner").get("/activity/")
    assert answer.status_code == 200
    assert "x/../y" in answer.content.decode() and "rf_0" in answer.content.decode()
