"""A failed refund an owner or admin marks handled leaves the to-do lists.

Seen before: a failed refund of an order with money still refundable stayed on the dashboard's
"Failed, not refunded again", in ``/refunds/?status=failed_open`` and in
``/orders/?status=refund_failed`` until someone refunded the order again through Sill; a
merchant who settled it another way (store credit, cash, a refund they chose not to make) had
no way to say so.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command

from audit.models import AuditRecord
from refunds.execution import execute_refund
from refunds.models import Refund, RefundStatus
from refunds.staff.handled import mark_failure_handled
from sill import errors

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(order, staff_refund, mock_rail, django_capture_on_commit_callbacks):
    """A staff refund of all of ``order`` the rail declined: $89.00 left to refund."""
    mock_rail.config = {"refund": "decline"}
    mock_rail.save()
    refund = staff_refund(order)
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "failed"
    refund.refresh_from_db()
    return refund


def _listed(client, refund: Refund) -> dict[str, bool]:
    dashboard = client.get("/").content.decode()
    counted = re.search(
        r'todo-failed[^"]*">\s*<a [^>]*><strong class="todo-count">(\d+)<', dashboard
    )
    assert counted is not None
    return {
        "dashboard": counted.group(1) == "1",
        "refunds": refund.id in client.get("/refunds/?status=failed_open").content.decode(),
        "orders": refund.order_id in client.get("/orders/?status=refund_failed").content.decode(),
    }


def _post(client, refund: Refund, **data: str):
    return client.post(f"/refunds/{refund.id}/handled/", data)


@pytest.mark.parametrize("persona", ["owner", "admin"])
def test_an_owner_or_admin_marks_it_handled_and_it_leaves_the_lists(client_for, failed, persona):
    client = client_for(persona)
    assert _listed(client, failed) == {"dashboard": True, "refunds": True, "orders": True}
    page = client.get(f"/orders/{failed.order_id}/").content.decode()
    banner = page[page.index(f'data-refund-id="{failed.id}" role="alert"') :]
    assert f'action="/refunds/{failed.id}/handled/"' in banner[: banner.index("</div>")]

    response = _post(client, failed, note="Gave store credit instead")
    assert (response.status_code, response["Location"]) == (302, f"/orders/{failed.order_id}/")
    page = client.get(f"/orders/{failed.order_id}/").content.decode()
    assert "Marked handled: the failed $89.00 refund is off the to-do lists." in page
    assert f'action="/refunds/{failed.id}/handled/"' not in page
    assert "Refund again from the form below" not in page  # its banner is gone
    assert _listed(client, failed) == {"dashboard": False, "refunds": False, "orders": False}
    failed.refresh_from_db()
    assert failed.status == RefundStatus.FAILED and failed.failure_handled_at is not None
    assert failed.failure_handled_by.get_username() == f"{persona}@roasters.example"
    record = AuditRecord.objects.get(kind="failure_handled")
    body = json.loads(record.payload)["body"]
    assert body["refund_id"] == failed.id
    assert body["resolved_by"] == f"{persona}@roasters.example"
    assert body["resolution_note"] == "Gave store credit instead"
    call_command("audit", "verify")

    refund_page = client.get(f"/refunds/{failed.id}/").content.decode()
    assert f"Marked handled by {persona}@roasters.example" in refund_page
    assert "Gave store credit instead" in refund_page


def test_marking_it_twice_changes_nothing_more(client_for, failed):
    owner = client_for("owner")
    _post(owner, failed)
    again = owner.post(f"/refunds/{failed.id}/handled/", follow=True)
    assert "This refund was already marked handled." in again.content.decode()
    assert AuditRecord.objects.filter(kind="failure_handled").count() == 1


def test_a_refund_that_did_not_fail_cannot_be_marked_handled(client_for, order, staff_refund):
    refund = staff_refund(order)  # processing: its execution never ran
    response = client_for("owner").post(f"/refunds/{refund.id}/handled/", follow=True)
    assert "Only a failed refund can be marked handled." in response.content.decode()
    refund.refresh_from_db()
    assert (refund.status, refund.failure_handled_at) == ("processing", None)
    assert not AuditRecord.objects.filter(kind="failure_handled").exists()


@pytest.mark.parametrize(
    ("persona", "status"), [("reviewer", 403), ("staff", 403), ("outsider", 404)]
)
def test_only_owners_and_admins_of_the_site_may_mark_it(client_for, failed, persona, status):
    client = client_for(persona)
    assert _post(client, failed).status_code == status
    failed.refresh_from_db()
    assert failed.failure_handled_at is None
    assert not AuditRecord.objects.filter(kind="failure_handled").exists()
    if persona != "outsider":
        page = client.get(f"/orders/{failed.order_id}/").content.decode()
        assert f"/refunds/{failed.id}/handled/" not in page


def test_marking_needs_a_post(client_for, failed):
    assert client_for("owner").get(f"/refunds/{failed.id}/handled/").status_code == 405


def test_the_service_checks_the_role_itself(failed, members):
    with pytest.raises(errors.PermissionDenied):
        mark_failure_handled(refund=failed, actor=members["reviewer"].user, note="")
    failed.refresh_from_db()
    assert failed.failure_handled_at is None


def test_a_note_longer_than_kept_is_refused_in_words_and_changes_nothing(client_for, failed):
    # Seen before: a note of 5,000 characters was cut to 1,000 without a word, and the signed
    # record kept less than the owner wrote.
    client = client_for("owner")
    response = _post(client, failed, note="x" * 5000)
    assert response.status_code == 302
    failed.refresh_from_db()
    assert failed.failure_handled_at is None
    assert not AuditRecord.objects.filter(kind="failure_handled").exists()
    page = client.get(response["Location"]).content.decode()
    assert "The note is 5,000 characters long: keep it to 1,000." in page


def test_a_note_with_a_nul_is_refused_and_changes_nothing(client_for, failed):
    response = _post(client_for("owner"), failed, note="cash\x00back")
    assert response.status_code == 400
    failed.refresh_from_db()
    assert failed.failure_handled_at is None
