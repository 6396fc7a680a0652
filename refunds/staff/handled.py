"""A failed refund an owner or admin marks handled: it leaves the to-do lists.

A failed refund stays a to-do (the dashboard's "Failed, not refunded again", the refund list's
``failed_open``, the order list's "Refund failed") until a later refund replaces it or nothing
is left to refund (:func:`refunds.staff.listing.open_failure`). A merchant who settled it
another way (store credit, cash) or decided not to refund has no later refund to make: an
owner or admin says so here. Nothing moves and the refund stays ``failed``; a signed
``failure_handled`` record names who did it and their note. It is not undone.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from refunds.models import Refund, RefundStatus
from refunds.services import refund_body
from sill.accounts.access import Cap, hold_member, require_member
from sill.errors import SillError

NOTE_MAX_LENGTH = 1000


def mark_failure_handled(*, refund: Refund, actor: Any, note: str = "") -> Refund:
    """Mark the failed ``refund`` handled by ``actor`` (an owner or admin of its site, else
    ``forbidden``; checked again in the transaction, ``access.hold_member``), with their
    ``note``. Refused, changing nothing, for a refund that did not
    fail (``invalid_state``, 409), was marked before (``already_resolved``, 409), or with a
    note over ``NOTE_MAX_LENGTH`` characters (``invalid_field``, 422)."""
    require_member(actor, refund.site_id, Cap.DECIDE_HELD)
    note = note.strip()
    if len(note) > NOTE_MAX_LENGTH:
        # Refused, not cut: the signed record would keep less than the person wrote.
        raise SillError(
            f"The note is {len(note):,} characters long: keep it to {NOTE_MAX_LENGTH:,}.",
            code="invalid_field",
            status=422,
        )
    with transaction.atomic():
        # Still allowed now, and until this commits: an owner's removal or demotion of the
        # member that came first (it may have waited for the chain behind another append)
        # refuses this; one that comes later waits for it. The member's rows, then the refund's.
        hold_member(actor, refund.site_id, Cap.DECIDE_HELD)
        locked = (
            Refund.objects.select_for_update(of=("self",))
            .select_related("site", "agent", "requested_by", "mandate", "customer")
            .get(pk=refund.pk)
        )
        if locked.status != RefundStatus.FAILED:
            raise SillError(
                "Only a failed refund can be marked handled.", code="invalid_state", status=409
            )
        if locked.failure_handled_at is not None:
            raise SillError(
                "This refund was already marked handled.", code="already_resolved", status=409
            )
        now = timezone.now()
        Refund.objects.filter(pk=locked.pk).update(
            failure_handled_at=now, failure_handled_by=actor, updated_at=now
        )
        # After the refund's own write: the append holds the site's chain head until commit.
        append_record(
            site=locked.site,
            kind=AuditKind.FAILURE_HANDLED,
            body=refund_body(
                locked,
                resolved_by=actor.get_username(),
                resolution_note=note or None,
                resolved_at=now.isoformat(),
            ),
        )
    return Refund.objects.get(pk=refund.pk)
