"""A reason an admin deletes while a staff member's refund picks it (PostgreSQL, real threads).

The refund reads its reason, then appends its decision to the site's audit chain; the delete
appends its record, then deletes. When the delete's record goes first, the refund has already
read the reason as alive and commits a refund pointing at a deleted row: the database refuses
that at commit, and the staff member got a server error instead of the form and its words.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from refunds.models import Refund, RefundReason
from refunds.reasons.services import delete_reason
from sill.rails.models import MockLedgerEntry
from tests.conftest import site_owner
from tests.refunds.test_staff_form_as_typed import _confirmation, _page_form
from tests.threads import lock_waiters

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _waiting(raw: Any) -> int:
    """How many other connections of this test database wait for a lock."""
    return lock_waiters(raw)


def _until(condition: Any) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for a lock wait"
        time.sleep(0.01)


def _in_thread(work: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:  # looked at by the test
            out.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_reason_deleted_while_the_refund_picks_it_refuses_the_refund_in_words(
    site, members, order, leaf
):
    staff = Client()
    staff.force_login(members["staff"].user)
    form = {**_page_form(staff, order), "reason": str(leaf.pk), "kind": "amount", "amount": "5"}
    form["note"] = "as typed"
    asked = staff.post(f"/orders/{order.id}/refund/", form)
    assert asked.status_code == 200
    confirmed = {**_confirmation(asked.content.decode()), "confirmed": "1"}
    owner = site_owner(site)

    # Another writer holds the site's audit chain head (as any refund or settlement does for a
    # moment): the delete queues on it first, holding what it holds, then the refund.
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    try:
        raw.execute("BEGIN")
        raw.execute("SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site.pk])
        deleting, deleted = _in_thread(lambda: delete_reason(reason=leaf, actor=owner))
        _until(lambda: _waiting(raw) >= 1)
        refunding, answered = _in_thread(
            lambda: staff.post(f"/orders/{order.id}/refund/", confirmed)
        )
        _until(lambda: _waiting(raw) >= 2)
        raw.execute("COMMIT")
        deleting.join(timeout=60)
        refunding.join(timeout=60)
    finally:
        raw.close()

    assert deleted == [None], deleted  # the admin's delete went through
    assert not RefundReason.objects.filter(pk=leaf.pk).exists()
    (response,) = answered
    assert not isinstance(response, Exception), response
    assert response.status_code == 422
    body = response.content.decode()
    assert "an admin may have deleted it" in body
    # The form keeps what was typed.
    assert 'name="amount" value="5"' in body and ">as typed</textarea>" in body
    assert not Refund.objects.exists()
    assert not MockLedgerEntry.objects.filter(kind="refund").exists()


def test_a_reason_deleted_after_the_confirmation_is_refused_in_words(site, members, order, leaf):
    staff = Client()
    staff.force_login(members["staff"].user)
    form = {**_page_form(staff, order), "reason": str(leaf.pk), "kind": "amount", "amount": "5"}
    asked = staff.post(f"/orders/{order.id}/refund/", form)
    confirmed = {**_confirmation(asked.content.decode()), "confirmed": "1"}
    delete_reason(reason=leaf, actor=site_owner(site))

    response = staff.post(f"/orders/{order.id}/refund/", confirmed)

    assert response.status_code == 422
    body = response.content.decode()
    assert "This site has no such refund reason (an admin may have deleted it)" in body
    assert 'name="amount" value="5"' in body
    assert not Refund.objects.exists()


def test_a_delete_while_a_refund_picks_the_reason_waits_and_is_refused(
    site, members, order, leaf, django_capture_on_commit_callbacks
):
    staff = Client()
    staff.force_login(members["staff"].user)
    form = {**_page_form(staff, order), "reason": str(leaf.pk), "kind": "amount", "amount": "5"}
    asked = staff.post(f"/orders/{order.id}/refund/", form)
    confirmed = {**_confirmation(asked.content.decode()), "confirmed": "1"}
    owner = site_owner(site)

    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    try:
        raw.execute("BEGIN")
        raw.execute("SELECT 1 FROM audit_auditchainhead WHERE site_id = %s FOR UPDATE", [site.pk])
        # This time the refund queues first (it has read its reason), then the delete.
        refunding, answered = _in_thread(
            lambda: staff.post(f"/orders/{order.id}/refund/", confirmed)
        )
        _until(lambda: _waiting(raw) >= 1)
        deleting, deleted = _in_thread(lambda: delete_reason(reason=leaf, actor=owner))
        _until(lambda: _waiting(raw) >= 2)
        raw.execute("COMMIT")
        refunding.join(timeout=60)
        deleting.join(timeout=60)
    finally:
        raw.close()

    (response,) = answered
    assert not isinstance(response, Exception), response
    assert response.status_code == 303
    refund = Refund.objects.get()
    assert (refund.amount_minor, refund.refund_reason_id) == (500, leaf.pk)
    (refused,) = deleted
    assert getattr(refused, "code", None) == "reason_in_use", refused
    assert RefundReason.objects.filter(pk=leaf.pk).exists()
