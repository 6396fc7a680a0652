"""The Reconciliation inbox: one charge's differences become items; people resolve them.

:func:`reconcile_charge` reads Sill's books for a charge, has the rail's refunds and disputes
synced into them (:func:`sill.rails.charge_sync.sync_charge`: a refund made outside Sill that
Sill had missed is recorded at once, so it stops counting as refundable; a settled refund the
rail reports failed is reversed), compares (:mod:`refunds.reconcile.differences`) and writes:

- a new difference opens an item with a signed ``reconciliation_found`` record; the database
  keeps one open item per key and site, so a second run (or two at once) never duplicates it;
- a dispute the sync recorded that Sill had missed opens an item Sill has already corrected,
  which waits for a person to acknowledge it;
- a difference seen again only refreshes the open item (``last_seen_at`` and current values);
- an open item of the charge that the run no longer finds is closed by Sill (``cleared``,
  nobody named) with its own signed record — unless Sill had corrected its books when it
  found it (``sill_corrected``): a missed refund stays in the inbox until someone
  acknowledges it.

:func:`reconcile_customer_credits` does the same for one customer's balance credits against
the balance transactions the rail lists for the customer; its items name the customer
instead of an order and a charge. Nothing is synced: Sill records no credits made outside it.

:func:`resolve_item` is a person's resolution: an owner or admin, an outcome and a note, in
one transaction under the item's row lock with a signed ``reconciliation_resolved`` record.

Nothing here starts a money movement: the rail is only read.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from audit.models import AuditKind
from audit.services import append_record
from refunds.credit_rail import CREDIT_RAIL
from refunds.models import (
    ReconciliationItem,
    ReconciliationResolution,
    Refund,
    RefundKind,
)
from refunds.reconcile.differences import (
    Difference,
    DisputeRow,
    OutsideRow,
    SillRefundRow,
    changed_during_read,
    credit_differences,
    differences,
    missed_disputes,
)
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Site
from sill.errors import NotFound, SillError
from sill.orders.models import Charge, Customer, ExternalRefund
from sill.rails.base import (
    ChargeReader,
    CreditReader,
    PermanentRailError,
    RailError,
    RetryableRailError,
    rail_label,
)
from sill.rails.charge_sync import sync_charge
from sill.rails.registry import RailDisabled, rail_for

logger = logging.getLogger(__name__)

NOTE_MAX_LENGTH = 1000
# What a person may record; "cleared" is Sill's alone.
PERSON_RESOLUTIONS = (
    ReconciliationResolution.ACKNOWLEDGED,
    ReconciliationResolution.FIXED_AT_RAIL,
    ReconciliationResolution.RECORDED_IN_SILL,
)
# Who may see and resolve the inbox: owners and admins.
RECONCILE_CAP = Cap.DECIDE_HELD


class PartlyUnreadable(PermanentRailError):
    """The rail listed a refund of the charge that could not be read: what it could read is
    recorded, and the charge is not compared (it counts as not read)."""


class AlreadyResolved(SillError):
    code = "already_resolved"
    status = 409


@dataclass(frozen=True)
class ChargeOutcome:
    opened: int
    cleared: int
    synced: list[str]
    disputes_read: bool = True


# --- one charge ---------------------------------------------------------------------------------


def reconcile_charge(*, charge: Charge, rail: ChargeReader, event_id: str) -> ChargeOutcome:
    """Sync and compare one charge with the rail; open and clear its items.

    Call outside any transaction (the rail reads are network calls). Raises ``RailError``
    when the rail's refunds cannot be listed: then nothing is recorded or cleared; and
    :class:`PartlyUnreadable` when the rail lists a refund it cannot read: the others and the
    disputes are recorded, and nothing is compared or cleared.
    """
    # Sill's books before the rail is read, and again after: what changed in between (a refund
    # settled, an outside refund a webhook recorded) is newer than the rail's list.
    refunds = Refund.objects.filter(charge=charge)
    sill_before = _sill_rows(refunds)
    before = _outside_rows(charge)
    disputes_before = set(charge.disputes.values_list("provider_dispute_id", flat=True))
    synced = sync_charge(charge=charge, rail=rail, event_id=event_id)
    if synced.refunds_left_out:
        # The refunds the rail could read are recorded; compared without the one it could
        # not, a Sill refund would look missing at the rail and open items would clear.
        raise PartlyUnreadable(
            f"{rail_label(charge.rail)} lists refunds of the charge Sill cannot read: "
            + ", ".join(synced.refunds_left_out[:5])
        )
    sill_after = _sill_rows(refunds)
    changing = changed_during_read(sill_before, sill_after)
    found = differences(
        rail=charge.rail,
        currency=charge.currency,
        listed=synced.refunds,
        sill=sill_after,
        outside_before=before,
        outside_after=_outside_rows(charge),
        changing=changing,
        not_recorded=synced.refunds_not_recorded,
    ) + missed_disputes(
        rail=charge.rail,
        currency=charge.currency,
        before=disputes_before,
        after=[
            DisputeRow(
                provider_dispute_id=d.provider_dispute_id,
                amount_minor=d.amount_minor,
                currency=d.currency,
                status_label=d.get_status_display(),
                rail_status=d.rail_status,
            )
            for d in charge.disputes.all()
        ],
    )
    opened = sum(open_item(charge=charge, difference=d) for d in found)
    # An item of a refund that changed during the read waits for the next run's comparison.
    cleared = clear_vanished(charge=charge, keys={d.key for d in found}, keep_refunds=changing)
    return ChargeOutcome(
        opened=opened, cleared=cleared, synced=synced.outcomes, disputes_read=synced.disputes_read
    )


def catch_up_charge(*, charge: Charge, rail: ChargeReader, event_id: str) -> bool:
    """The catch-up with the rail of a refund decision and of a held refund's approval
    (``policies.facts.CatchUp``): the charge is reconciled as a run would
    (:func:`reconcile_charge`), so a refund or dispute the rail reports that Sill had missed is
    recorded before the quote *and* opens its inbox item.

    Only recording it (as decisions once did) left the books right and the merchant
    uninformed: the next run found nothing missing, so the missed webhook was never shown.
    Whether the disputes could be read."""
    return reconcile_charge(charge=charge, rail=rail, event_id=event_id).disputes_read


def catch_up_reported_charge(*, charge_id: str, event_id: str) -> str:
    """The catch-up of a rail event that says the charge has refunds Sill has not recorded
    without naming them (Stripe's ``charge.refunded`` without the charge's refunds, as API
    versions from 2022-11-15 send it): the charge is reconciled as a run would, so the refund
    is recorded now, not when a run or a refund decision next reads the charge, and opens its
    inbox item. Run by ``refunds.catch_up_charge``, which retries a rail that did not answer
    (``RetryableRailError``, raised): a reconciliation run reads only charges of its window or
    that Sill touched since, so it may never read this one. Returns what was done."""
    charge = Charge.objects.select_related("order").filter(pk=charge_id).first()
    if charge is None:
        return "no such charge"
    try:
        rail = rail_for(
            site_id=charge.order.site_id,
            rail=charge.rail,
            provider_account=charge.provider_account,
            payment_account=charge.payment_account,
        )
        if not isinstance(rail, ChargeReader):
            return "not read: the rail cannot list a charge's refunds"
        outcome = reconcile_charge(charge=charge, rail=rail, event_id=event_id)
    except RetryableRailError:
        raise
    except (RailDisabled, RailError) as exc:
        logger.warning("charge %s could not be brought up to date: %s", charge.pk, exc)
        return f"not read: {exc}"
    return f"{outcome.opened} opened, {outcome.cleared} cleared: {'; '.join(outcome.synced)}"


def reconcile_customer_credits(
    *, customer: Customer, rail: CreditReader, since: datetime
) -> ChargeOutcome:
    """Compare ``customer``'s credits with the balance transactions the rail lists for them;
    open and clear their items (refunds.reconcile.differences.credit_differences).

    Compared: the customer's credits changed since ``since`` and those with an open item, and
    any credit a listed transaction names. The rail is read back to the oldest of them (a
    credit's transaction is made after the credit), so a credit Sill settled is never
    reported missing because its transaction was older than the read; while the customer
    has an open item, their whole history is read, so an item is only cleared when its
    difference is gone, never because its transaction fell out of the read. Call outside any
    transaction; raises ``RailError`` when the rail cannot be read (nothing recorded).
    """
    credits = Refund.objects.filter(customer=customer, kind=RefundKind.CUSTOMER_CREDIT)
    open_items = ReconciliationItem.objects.filter(customer=customer, resolved_at__isnull=True)
    recent = Q(updated_at__gte=since) | Q(pk__in=open_items.values("refund_id"))
    oldest = credits.filter(recent).aggregate(oldest=Min("created_at"))["oldest"]
    read_since: datetime | None = min(since, oldest) if oldest else since
    if open_items.exists():
        read_since = None
    listed = rail.list_credits(customer.rail_customer_id, since=read_since)
    named = [r.sill_refund_id for r in listed if r.sill_refund_id]
    found = credit_differences(
        rail=CREDIT_RAIL,
        listed=listed,
        sill=_sill_rows(credits.filter(recent | Q(pk__in=named))),
    )
    opened = sum(open_item(customer=customer, difference=d) for d in found)
    cleared = clear_vanished(customer=customer, keys={d.key for d in found})
    return ChargeOutcome(opened=opened, cleared=cleared, synced=[])


def _sill_rows(refunds: QuerySet[Refund]) -> list[SillRefundRow]:
    return [
        SillRefundRow(
            refund_id=r.id,
            provider_refund_id=r.provider_refund_id,
            status=r.status,
            amount_minor=r.amount_minor,
            currency=r.currency,
        )
        for r in refunds.only("id", "provider_refund_id", "status", "amount_minor", "currency")
    ]


def _outside_rows(charge: Charge) -> dict[str, OutsideRow]:
    return {
        e.provider_refund_id: OutsideRow(
            provider_refund_id=e.provider_refund_id,
            amount_minor=e.amount_minor,
            currency=e.currency,
            status=e.status,
        )
        for e in ExternalRefund.objects.filter(charge=charge)
    }


# --- items --------------------------------------------------------------------------------------


# The fields an item copies from its Difference, refreshed when a run sees it again.
_VALUE_FIELDS = (
    "provider_refund_id",
    "currency",
    "sill_amount_minor",
    "rail_amount_minor",
    "rail_currency",
    "sill_status",
    "rail_status",
    "detail",
)


def open_item(
    *,
    difference: Difference,
    charge: Charge | None = None,
    customer: Customer | None = None,
    now: datetime | None = None,
) -> bool:
    """Open an item for ``difference`` of ``charge``, or of ``customer``'s credits, unless one
    is open for its key; True when opened."""
    now = now or timezone.now()
    subject = _subject(charge, customer)
    site_id = subject["site"].pk
    values = {name: getattr(difference, name) for name in _VALUE_FIELDS}
    refreshed = ReconciliationItem.objects.filter(
        site_id=site_id, key=difference.key, resolved_at__isnull=True
    ).update(last_seen_at=now, **values)
    if refreshed:
        return False
    try:
        with transaction.atomic():
            item = ReconciliationItem.objects.create(
                kind=difference.kind,
                key=difference.key,
                refund_id=difference.refund_id or None,
                sill_corrected=difference.sill_corrected,
                found_at=now,
                last_seen_at=now,
                **subject,
                **values,
            )
            append_record(
                site=subject["site"],
                kind=AuditKind.RECONCILIATION_FOUND,
                body=item_body(item),
            )
    except IntegrityError:
        # Another run opened the same difference a moment ago: one item is enough. Any other
        # constraint that failed is a bug, and is raised.
        if not ReconciliationItem.objects.filter(
            site_id=site_id, key=difference.key, resolved_at__isnull=True
        ).exists():
            raise
        return False
    return True


def _subject(charge: Charge | None, customer: Customer | None) -> dict[str, Any]:
    """What an item of ``charge`` or of ``customer``'s credits names (exactly one is given)."""
    if (charge is None) == (customer is None):
        raise TypeError("an item is of a charge or of a customer's credits")
    if charge is not None:
        return {
            "site": charge.order.site,
            "order_id": charge.order_id,
            "charge": charge,
            "rail": charge.rail,
        }
    assert customer is not None
    return {"site": customer.site, "customer": customer, "rail": CREDIT_RAIL}


def clear_vanished(
    *,
    keys: set[str],
    charge: Charge | None = None,
    customer: Customer | None = None,
    now: datetime | None = None,
    keep_refunds: Collection[str] = (),
) -> int:
    """Close the open items of ``charge`` (or of ``customer``'s credits) whose difference the
    run no longer found, except the items of ``keep_refunds`` (not compared this run)."""
    whose = {"charge": charge} if charge is not None else {"customer": customer}
    stale = ReconciliationItem.objects.filter(
        resolved_at__isnull=True, sill_corrected=False, **whose
    ).exclude(key__in=keys)
    if keep_refunds:
        stale = stale.exclude(refund_id__in=list(keep_refunds))
    cleared = 0
    for item_id in stale.values_list("id", flat=True):
        with transaction.atomic():
            # The item's row alone, as resolve_item locks it: joined, the site's row would be
            # locked FOR UPDATE until the append, and deadlock with an append of the site
            # committing meanwhile.
            item = (
                ReconciliationItem.objects.select_for_update(of=("self",))
                .select_related("site")
                .filter(pk=item_id, resolved_at__isnull=True)
                .first()
            )
            if item is None:
                continue  # someone resolved it meanwhile
            _close(
                item,
                resolution=ReconciliationResolution.CLEARED,
                actor=None,
                note="A later reconciliation found Sill's books and the rail's in agreement.",
                now=now or timezone.now(),
            )
            cleared += 1
    return cleared


def resolve_item(
    *, site: Site, item_id: int, actor: Any, resolution: str, note: str
) -> ReconciliationItem:
    """An owner or admin of ``site`` resolves one open item with an outcome and a note.

    ``resolution`` is the form's text as posted (one of :data:`PERSON_RESOLUTIONS`, else
    ``invalid_field``); the note is required. Another site's item is ``not_found``; an item
    resolved meanwhile is :class:`AlreadyResolved`. ``actor`` is checked before anything is
    read (403 ``forbidden``) and again in the resolution's transaction
    (``access.hold_member``).
    """
    require_member(actor, site.pk, RECONCILE_CAP)
    if resolution not in PERSON_RESOLUTIONS:
        raise SillError(
            "Choose how this difference was resolved.", code="invalid_field", field="resolution"
        )
    note = note.strip()
    if not note:
        raise SillError(
            "Write a short note: what you checked or changed.", code="invalid_field", field="note"
        )
    if len(note) > NOTE_MAX_LENGTH:
        raise SillError(
            f"Keep the note under {NOTE_MAX_LENGTH} characters.", code="invalid_field", field="note"
        )
    with transaction.atomic():
        # Still allowed now, and until this commits: an owner's removal or demotion of the
        # member that came first (it may have waited for the chain behind another append)
        # refuses this; one that comes later waits for it. The member's rows, then the item's.
        hold_member(actor, site.pk, RECONCILE_CAP)
        # The item's row alone (``of``): joined, the site's row would be locked FOR UPDATE
        # until the append, and an append of the site committing meanwhile (its foreign keys'
        # check share-locks that row while it holds the chain head) would deadlock with it.
        item = (
            ReconciliationItem.objects.select_for_update(of=("self",))
            .select_related("site")
            .filter(site=site, pk=item_id)
            .first()
        )
        if item is None:
            raise NotFound("No such reconciliation item on this site.")
        if item.resolved_at is not None:
            raise AlreadyResolved("This difference was already resolved.")
        _close(item, resolution=resolution, actor=actor, note=note, now=timezone.now())
    return item


def _close(
    item: ReconciliationItem, *, resolution: str, actor: Any, note: str, now: datetime
) -> None:
    """Resolve the locked, open ``item`` and write its signed record (caller's transaction)."""
    item.resolved_at = now
    item.resolved_by = actor
    item.resolution = resolution
    item.resolution_note = note
    item.save(update_fields=["resolved_at", "resolved_by", "resolution", "resolution_note"])
    append_record(
        site=item.site,
        kind=AuditKind.RECONCILIATION_RESOLVED,
        body=item_body(
            item,
            resolution=resolution,
            resolved_by=actor.get_username() if actor is not None else None,
            resolution_note=note,
            resolved_at=now.isoformat(),
        ),
    )


def item_body(item: ReconciliationItem, **extra: Any) -> dict[str, Any]:
    """The audit body describing ``item``: integers, strings and null only."""
    body: dict[str, Any] = {
        "item_id": item.pk,
        "kind": item.kind,
        "key": item.key,
        "order_id": item.order_id,
        "charge_id": item.charge_id,
        "customer_id": item.customer_id,
        "refund_id": item.refund_id,
        "rail": item.rail,
        "provider_refund_id": item.provider_refund_id or None,
        "currency": item.currency,
        "sill_amount_minor": item.sill_amount_minor,
        "rail_amount_minor": item.rail_amount_minor,
        "rail_currency": item.rail_currency or None,
        "sill_status": item.sill_status or None,
        "rail_status": item.rail_status or None,
        "detail": item.detail,
        "sill_corrected": item.sill_corrected,
        "found_at": item.found_at.isoformat(),
    }
    body.update(extra)
    return body
