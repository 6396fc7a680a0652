"""The needs_attention rule: once an attempt may have reached the rail, a refund never fails
and never releases its reservation until the rail says, for its key, that nothing exists.

Each attempt is run as the worker runs it (``execute_refund``); the beat task's lookup is
``check_refund_at_rail``.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditRecord
from refunds.execution import RetryLater, execute_refund
from refunds.reconcile.attention import check_refund_at_rail, resolve_attention
from refunds.staff.services import NotRefundable
from sill.errors import SillError
from sill.orders.models import Charge
from sill.rails.models import MockLedgerEntry
from tests.conftest import site_owner
from tests.refunds.conftest import made_but_unrecordable, outside_refund

pytestmark = pytest.mark.django_db


@pytest.fixture
def yen_order(make_order):
    """Order #1004 of the defect report: ¥10,000 on the mock rail."""
    return make_order(total="10000", currency="JPY")


def _script(rail, **config):
    rail.config = config
    rail.save()


def _switch(rail, *, on: bool):
    rail.enabled = on
    rail.save()


def _books(order):
    charge = Charge.objects.get(order=order)
    return charge.amount_refunded_minor, charge.amount_reserved_minor


def test_it_never_fails_a_refund_the_rail_may_hold_when_the_rail_is_switched_off(
    yen_order, staff_refund, mock_rail
):
    """Defect 1: timeout after effect, owner switches the rail off, the retry meets RailDisabled."""
    _script(mock_rail, refund="timeout_after_effect", fail_times=1)
    refund = staff_refund(yen_order)
    assert refund.status == "processing"
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    _switch(mock_rail, on=False)

    assert execute_refund(refund.id) == "needs_attention"
    refund.refresh_from_db()
    assert refund.status == "needs_attention" and refund.outcome_code == "rail_disabled"
    assert _books(yen_order) == (0, 10000)  # still reserved

    _switch(mock_rail, on=True)
    with pytest.raises(NotRefundable):
        staff_refund(yen_order)  # nothing left to refund: the reservation holds

    assert check_refund_at_rail(refund.id) == "succeeded"
    refund.refresh_from_db()
    assert refund.status == "succeeded"
    assert _books(yen_order) == (10000, 0)
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    with pytest.raises(NotRefundable):
        staff_refund(yen_order)
    assert list(AuditRecord.objects.filter(kind="needs_attention").values_list("kind", flat=True))
    call_command("audit", "verify")


def test_it_never_fails_a_refund_the_rail_may_hold_when_the_lookup_is_refused(
    yen_order, staff_refund, mock_rail
):
    """The sibling: a rotated or restricted key makes find_refund fail for good."""
    _script(mock_rail, refund="timeout_after_effect", fail_times=1)
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    _script(mock_rail, lookup="reject")

    assert execute_refund(refund.id) == "needs_attention"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("needs_attention", "rail_auth_failed")
    assert _books(yen_order) == (0, 10000)
    assert check_refund_at_rail(refund.id) == "unknown"  # still can't ask: nothing changes
    refund.refresh_from_db()
    assert refund.status == "needs_attention" and refund.next_check_at is not None

    _script(mock_rail)
    assert check_refund_at_rail(refund.id) == "succeeded"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert _books(yen_order) == (10000, 0)


def test_it_releases_the_reservation_only_when_the_rail_says_no_refund_exists(
    yen_order, staff_refund, mock_rail
):
    _script(mock_rail, refund="timeout", fail_times=1)  # timed out before the rail acted
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    _switch(mock_rail, on=False)
    assert execute_refund(refund.id) == "needs_attention"
    assert _books(yen_order) == (0, 10000)

    _switch(mock_rail, on=True)
    assert check_refund_at_rail(refund.id) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "not_at_rail")
    assert _books(yen_order) == (0, 0)
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 0
    _script(mock_rail)
    again = staff_refund(yen_order)  # the money can be refunded again, once
    assert execute_refund(again.id) == "succeeded"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def test_a_rail_switched_off_before_any_attempt_fails_and_releases(
    yen_order, staff_refund, mock_rail
):
    refund = staff_refund(yen_order)
    _switch(mock_rail, on=False)
    assert execute_refund(refund.id) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "rail_disabled")
    assert _books(yen_order) == (0, 0)


def test_a_decline_is_never_retried(yen_order, staff_refund, mock_rail):
    _script(mock_rail, refund="decline")
    refund = staff_refund(yen_order)
    assert execute_refund(refund.id) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.attempts) == ("failed", 1)
    assert execute_refund(refund.id) == "not-claimed"
    assert _books(yen_order) == (0, 0)


def test_retries_are_bounded_in_attempts_then_owners_and_admins_get_one_email(
    yen_order, staff_refund, mock_rail, settings, django_capture_on_commit_callbacks
):
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 3
    _script(mock_rail, refund="timeout")
    refund = staff_refund(yen_order)
    for _ in range(2):
        with pytest.raises(RetryLater):
            execute_refund(refund.id)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_refund(refund.id) == "needs_attention"
    refund.refresh_from_db()
    assert refund.status == "needs_attention" and refund.attempts == 3
    assert "gave up after 3 attempts" in refund.failure_message
    # One each, in their role's words (tests/refunds/test_attention_email.py).
    assert sorted(m.to for m in mail.outbox) == [
        ["admin@roasters.example"],
        ["owner@roasters.example"],
    ]
    assert all("Needs attention" in m.subject for m in mail.outbox)
    assert execute_refund(refund.id) == "not-claimed"  # no more attempts on the money path
    from refunds.reconcile.attention import notify_attention

    assert notify_attention(refund_id=refund.id) is False  # once
    assert len(mail.outbox) == 2


def test_an_email_the_on_commit_task_missed_is_sent_by_the_beat_sweep(
    yen_order, staff_refund, mock_rail, settings, django_capture_on_commit_callbacks
):
    """The owners' email was only sent by a task enqueued on commit: a lost message (a broker
    restart, a worker killed before it ran) meant no one was ever told."""
    from refunds.tasks import check_attention_refunds_task

    settings.SILL_EXECUTION_MAX_ATTEMPTS = 1
    _script(mock_rail, refund="timeout")
    refund = staff_refund(yen_order)
    with django_capture_on_commit_callbacks(execute=False):  # the enqueue is lost
        assert execute_refund(refund.id) == "needs_attention"
    # One attempt, said so (it read "gave up after 1 attempts").
    refund.refresh_from_db()
    assert refund.failure_message == (
        "gave up after 1 attempt: mock rail: the refund timed out (scripted)"
    )
    mail.outbox.clear()
    check_attention_refunds_task()
    assert len(mail.outbox) == 2  # the owner's and the admin's
    assert all("Needs attention" in m.subject for m in mail.outbox)
    check_attention_refunds_task()
    assert len(mail.outbox) == 2  # once


def test_retries_are_bounded_in_elapsed_time(yen_order, staff_refund, mock_rail, settings):
    import time_machine
    from django.utils import timezone

    settings.SILL_EXECUTION_MAX_SECONDS = 600
    _script(mock_rail, refund="timeout")  # the rail may have made it: never failed
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater):
        execute_refund(refund.id)
    with time_machine.travel(timezone.now() + timezone.timedelta(minutes=11)):
        assert execute_refund(refund.id) == "needs_attention"


def test_a_refund_the_rail_rate_limited_every_time_fails_as_nothing_moved(
    yen_order, staff_refund, mock_rail, settings, client_for
):
    """A 429 says the call did nothing, and each retry's lookup said the rail holds no refund
    under the key: the refund was not made. It needed attention, its page saying "The rail may
    have made this refund", and its amount stayed reserved."""
    settings.SILL_EXECUTION_MAX_ATTEMPTS = 2
    _script(mock_rail, refund="rate_limited")
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater) as first:
        execute_refund(refund.id)
    assert not first.value.ambiguous
    assert execute_refund(refund.id) == "failed"
    refund.refresh_from_db()
    assert (refund.status, refund.outcome_code) == ("failed", "rail_unavailable")
    assert refund.failure_message == "gave up after 2 attempts: mock rail: rate limited (scripted)"
    assert _books(yen_order) == (0, 0)  # released: it can be refunded again
    page = client_for("owner").get(f"/orders/{yen_order.id}/").content.decode()
    assert "may have made" not in page
    assert "The rail was unavailable" in page and "Nothing moved." in page


def test_an_unexpected_error_after_the_rail_call_is_ambiguous_and_recovered_by_lookup(
    yen_order, staff_refund, mock_rail
):
    _script(mock_rail, refund="error_after_effect", fail_times=1)
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater) as first:
        execute_refund(refund.id)
    assert first.value.ambiguous
    assert execute_refund(refund.id) == "succeeded"
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    assert _books(yen_order) == (10000, 0)


def test_an_unexpected_error_is_logged_naming_the_refund_and_its_site(
    yen_order, staff_refund, mock_rail, caplog
):
    # On-call reads the error, with its traceback, in the worker's log: which merchant's
    # refund it is must be there, not only a refund id to look up while the database may be
    # the very thing that is failing.
    _script(mock_rail, refund="error_after_effect", fail_times=1)
    refund = staff_refund(yen_order)
    with caplog.at_level(logging.ERROR, logger="refunds.execution"), pytest.raises(RetryLater):
        execute_refund(refund.id)
    [line] = [r.getMessage() for r in caplog.records if r.name == "refunds.execution"]
    assert line == f"refund {refund.id} of site {refund.site_id}: unexpected error during execution"


def test_an_error_before_the_rail_call_is_retryable_not_ambiguous(
    yen_order, staff_refund, mock_rail
):
    mock_rail.config = {"refund": "no-such-script"}  # the rail cannot even be built
    mock_rail.save()
    refund = staff_refund(yen_order)
    with pytest.raises(RetryLater) as first:
        execute_refund(refund.id)
    assert not first.value.ambiguous
    refund.refresh_from_db()
    assert refund.status == "processing" and refund.rail_attempted_at is None
    _script(mock_rail)
    assert execute_refund(refund.id) == "succeeded"


def test_a_refund_needing_attention_counts_as_live_for_the_agent_rule(
    yen_order, staff_refund, mock_rail
):
    from refunds.models import LIVE_STATUSES, RESERVED_STATUSES

    assert "needs_attention" in LIVE_STATUSES and "needs_attention" in RESERVED_STATUSES


def test_an_agent_asking_again_while_its_refund_needs_attention_is_told_already_executed(
    original, sign, mock_rail, django_capture_on_commit_callbacks
):
    from django.test import Client

    from tests.refunds.conftest import post, refund_intent

    _script(mock_rail, refund="timeout_after_effect", fail_times=1)
    with django_capture_on_commit_callbacks(execute=False):
        first = post(Client(), sign(refund_intent(original.source_mandate_id))).json()
    with pytest.raises(RetryLater):
        execute_refund(first["refund_id"])
    _switch(mock_rail, on=False)
    assert execute_refund(first["refund_id"]) == "needs_attention"
    again = post(Client(), sign(refund_intent(original.source_mandate_id)))
    assert again.status_code == 201
    assert (again.json()["decision"], again.json()["reason"]) == ("rejected", "already_executed")
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1


def _made_but_unrecordable(order, staff_refund, mock_rail):
    return made_but_unrecordable(mock_rail, lambda: staff_refund(order))


def test_a_refund_the_rail_made_that_sill_cannot_record_needs_attention_at_once_by_its_id(
    yen_order, staff_refund, mock_rail, django_capture_on_commit_callbacks
):
    """The rail made Sill's refund (its answer lost), and meanwhile a dashboard refund of the
    whole charge was reported: recording Sill's too would count more than was charged (the
    charge's constraint). The money moved once: the refund needs attention at once, naming
    the rail's refund id and what to check, and nothing is sent to the rail again."""
    with django_capture_on_commit_callbacks(execute=True):
        refund, made = _made_but_unrecordable(yen_order, staff_refund, mock_rail)
    assert (refund.status, refund.outcome_code) == ("needs_attention", "exceeds_charge_at_rail")
    assert refund.provider_refund_id == made.provider_id  # kept, not only in a message
    assert refund.lease_until is None
    message = refund.failure_message
    assert f"Mock refunded ¥10,000 for this refund as {made.provider_id}" in message
    assert "¥10,000 of the ¥10,000 charged as refunded outside Sill" in message
    assert "Sill will not send it again" in message and "could not record" not in message
    flagged = AuditRecord.objects.get(kind="needs_attention")
    assert json.loads(flagged.payload)["body"]["provider_refund_id"] == made.provider_id
    assert mail.outbox and all(made.provider_id in told.body for told in mail.outbox)
    assert "Mock made it, and Sill could not record it." in mail.outbox[0].body
    assert _books(yen_order) == (0, 10000)  # still reserved: nobody refunds it again

    # The beat's lookup finds it again and leaves it as it is, asked again later.
    assert check_refund_at_rail(refund.id) == "needs_attention"
    refund.refresh_from_db()
    assert refund.status == "needs_attention" and refund.failure_message == message
    assert refund.lease_until is None and refund.next_check_at > timezone.now()
    # An owner who records that id is told why it cannot be recorded yet (not a 500).
    with pytest.raises(SillError) as refused:
        resolve_attention(
            refund=refund, actor=site_owner(refund.site), outcome="refunded",
            provider_refund_id=made.provider_id,
        )  # fmt: skip
    assert refused.value.code == "exceeds_charge_at_rail"
    assert AuditRecord.objects.filter(kind="needs_attention").count() == 1

    # The dashboard refund turns out failed: the next lookup records Sill's refund.
    outside_refund(yen_order, status="failed")
    assert check_refund_at_rail(refund.id) == "succeeded"
    refund.refresh_from_db()
    assert (refund.status, refund.provider_refund_id) == ("succeeded", made.provider_id)
    assert _books(yen_order) == (10000, 0)
    assert MockLedgerEntry.objects.filter(kind="refund").count() == 1
    call_command("audit", "verify")


def test_an_owner_cannot_record_no_refund_for_a_refund_the_rail_made(
    yen_order, staff_refund, mock_rail, client
):
    """ "No refund was made" releases the reservation and fails the refund: for a refund the
    rail confirmed by its id, that would let the same money be refunded again. It is refused
    in the service (nothing written, still reserved) and not offered on the order page."""
    refund, made = _made_but_unrecordable(yen_order, staff_refund, mock_rail)
    owner = site_owner(refund.site)
    records = AuditRecord.objects.count()
    with pytest.raises(SillError) as refused:
        resolve_attention(refund=refund, actor=owner, outcome="not_refunded")
    assert refused.value.code == "rail_refunded"
    assert made.provider_id in refused.value.message
    refund.refresh_from_db()
    assert (refund.status, refund.lease_until) == ("needs_attention", None)
    assert _books(yen_order) == (0, 10000) and AuditRecord.objects.count() == records

    client.force_login(owner)
    page = client.get(f"/orders/{yen_order.id}/").content.decode()
    assert f'id="attention-{refund.id}"' in page
    assert 'value="not_refunded"' not in page
    assert f"Mock made this refund ({made.provider_id})" in page


def test_the_refund_page_says_the_rail_made_a_refund_sill_could_not_record(
    yen_order, staff_refund, mock_rail, client
):
    """The refund's own page, like the order page, says the rail made it (naming its id), not
    that the rail has not confirmed it: in its status and in its timeline."""
    refund, made = _made_but_unrecordable(yen_order, staff_refund, mock_rail)
    client.force_login(site_owner(refund.site))
    page = client.get(f"/refunds/{refund.id}/").content.decode()
    assert "has not confirmed" not in page
    assert f"Mock made this refund ({made.provider_id}), but Sill could not record it" in page
    assert "Needs attention: Mock made the refund; Sill could not record it" in page
    assert f"<dt>Rail refund id</dt><dd>{made.provider_id}</dd>" in page


@pytest.mark.parametrize("path", ["/", "/reconcile/"])
def test_the_lists_of_refunds_needing_attention_do_not_say_the_rail_has_not_made_them(
    yen_order, staff_refund, mock_rail, client, path
):
    """The dashboard's and Reconciliation's list of refunds that need attention introduced
    them all as refunds the rail may have made without confirming; one the rail made, by its
    id, that Sill could not record is listed there too."""
    refund, _made = _made_but_unrecordable(yen_order, staff_refund, mock_rail)
    client.force_login(site_owner(refund.site))
    page = client.get(path).content.decode()
    assert f"#{yen_order.number}" in page
    assert "may have made" not in page and "has not confirmed" not in page
    assert "the rail's answer was lost, or the rail made" in page.replace("&#x27;", "'")
