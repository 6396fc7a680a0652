"""Bringing Sill's books for one charge up to date with what the rail holds for it.

Used when the rail's figures say Sill is missing something (at decision time: the rail counts
more refunded than Sill recorded, or a dispute) and by reconciliation. It reads the charge's
refunds and disputes at the rail (``ChargeReader``) and records, through
:mod:`sill.orders.outside`, the outside refunds and disputes Sill has not seen, and hands the
rail's state of Sill's own refunds to the refund core (a late failure is reversed there).
It never starts a money movement. Call it outside any transaction: the reads are network
calls, and each record takes its own row locks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import DatabaseError
from django.utils import timezone

from sill.orders.models import Charge
from sill.orders.outside import (
    ExceedsCharge,
    ReportedDispute,
    record_dispute,
    record_rail_refund,
)
from sill.rails.base import ChargeReader, RailError, RailRefund, left_out
from sill.rails.dispute_states import dispute_status

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChargeSync:
    """What the rail listed for the charge, and what was done with it.

    ``refunds_left_out``: the refunds the rail listed that it could not read
    (:class:`sill.rails.base.RailList`); while there are any, ``refunds`` is not all the rail
    has, and must not be compared as if it were. ``refunds_read``: the list was read whole and
    every refund in it recorded (one the books cannot hold, beyond the charge aside, is
    logged and passed over). ``refunds_not_recorded``: the rail ids of those passed over for
    another reason than the charge's room (a database error on its row), so that nothing says
    they would exceed the charge. ``disputes_read``: the disputes were listed whole and each
    was recorded."""

    refunds: list[RailRefund]
    disputes_read: bool
    outcomes: list[str] = field(default_factory=list)
    refunds_read: bool = True
    refunds_left_out: list[str] = field(default_factory=list)
    refunds_not_recorded: list[str] = field(default_factory=list)


def sync_charge(*, charge: Charge, rail: ChargeReader, event_id: str) -> ChargeSync:
    """Record what the rail holds for ``charge`` that Sill has not; ``event_id`` names the
    occasion in the audit records (e.g. ``"decision:rf_…"`` or ``"reconcile:…"``).

    Raises ``RailError`` when the refunds cannot be listed (nothing is recorded then); a
    dispute list that fails leaves ``disputes_read`` False and records no dispute. One refund
    or dispute the rail lists unreadable, or that cannot be recorded, or a dispute listed
    without an id, is logged (naming it, the charge and the site) and passed over, the others
    recorded; a dispute recorded as the list says, its details not read, leaves
    ``disputes_read`` False too. The sync says so (``refunds_read``, ``refunds_left_out``,
    ``disputes_read``).
    """
    # What the rail lists is its state as of the read, at least: recorded as of the read's
    # start, a webhook for a change made while the list was read still applies after it. To
    # the whole second: Stripe's event times have no finer resolution, so a change in the
    # read's second (after the list was taken) carries the read's second, no earlier, and the
    # state further along wins (sill.orders.outside._older).
    now = timezone.now().replace(microsecond=0)
    refunds = rail.list_refunds(
        charge.provider_charge_id, provider_payment_id=charge.provider_payment_id
    )
    outcomes: list[str] = []
    unreadable = left_out(refunds)
    for item in unreadable:
        _log_unreadable("refund", item, charge)
        outcomes.append(f"{item}: unreadable, not recorded")
    all_recorded = not unreadable
    not_recorded: list[str] = []
    for listed in refunds:
        if not listed.sill_refund_id and (
            listed.currency != charge.currency or listed.amount_minor <= 0
        ):
            done = "not a refund of this charge's currency"
        else:
            # A refund the rail lists failed is recorded too (it counts nothing), as its
            # webhook records it: left out, a late webhook with its earlier state (Stripe's
            # refund.created, pending or succeeded, retried for days) found no record to be
            # older than and counted it as refunded.
            try:
                done = record_rail_refund(
                    charge=charge, refund=listed, event_id=event_id, event_at=now
                )
            except ExceedsCharge as exc:
                # Sill's books are what is wrong; the comparison after the sync shows it.
                done = f"not recorded: {exc}"
            except Exception as exc:
                # One refund the books cannot hold (rolled back: a value too long, a database
                # error on its row) must not keep the others from being recorded: each lowers
                # what is refundable. It is said, and the refunds count as not all read.
                all_recorded = False
                not_recorded.append(listed.provider_refund_id)
                done = f"not recorded: {type(exc).__name__}"
                _log_unrecorded("refund", listed.provider_refund_id, charge, exc)
        outcomes.append(f"{listed.provider_refund_id}: {done}")
    try:
        disputes = rail.list_disputes(
            charge.provider_charge_id, provider_payment_id=charge.provider_payment_id
        )
    except RailError:
        return ChargeSync(
            refunds=refunds,
            disputes_read=False,
            outcomes=outcomes,
            refunds_read=all_recorded,
            refunds_left_out=unreadable,
            refunds_not_recorded=not_recorded,
        )
    disputes_recorded = True
    for item in left_out(disputes):
        # Sill's list of disputes lacks it: a decision keeps the rail's own "disputed".
        disputes_recorded = False
        _log_unreadable("dispute", item, charge)
        outcomes.append(f"{item}: unreadable, not recorded")
    for dispute in disputes:
        if not dispute.provider_dispute_id:
            # The rail listed a dispute without an id: nothing to record it under, and Sill's
            # list lacks it, so the disputes count as not read (as one not recorded below).
            disputes_recorded = False
            logger.warning(
                "a dispute of charge %s of site %s has no id at the rail: not recorded",
                charge.pk, charge.order.site_id,
            )  # fmt: skip
            outcomes.append("a dispute without an id: not recorded")
            continue
        try:
            done = record_dispute(
                charge=charge,
                dispute=ReportedDispute(
                    provider_dispute_id=dispute.provider_dispute_id,
                    reason=dispute.reason,
                    amount_minor=dispute.amount_minor,
                    currency=dispute.currency,
                    status=dispute_status(dispute.status),
                    rail_status=dispute.status,
                    opened_at=dispute.created_at,
                ),
                event_id=event_id,
                event_at=now,
            )
        except Exception as exc:
            # One dispute the books cannot hold (rolled back) must not keep the others from
            # being recorded: each refuses refunds of the charge. It is said, and the disputes
            # count as not read: Sill's list lacks one, so a decision keeps the rail's own
            # "disputed" (policies.facts) rather than Sill's incomplete list.
            disputes_recorded = False
            done = f"not recorded: {type(exc).__name__}"
            _log_unrecorded("dispute", dispute.provider_dispute_id, charge, exc)
        if not dispute.details_read:
            # Recorded as the list says (it refuses refunds), but Sill's record may lack what
            # its details say: a decision keeps the rail's own "disputed".
            disputes_recorded = False
            done += " (as the rail's list says: its details could not be read)"
        outcomes.append(f"{dispute.provider_dispute_id}: {done}")
    return ChargeSync(
        refunds=refunds,
        disputes_read=disputes_recorded,
        outcomes=outcomes,
        refunds_read=all_recorded,
        refunds_left_out=unreadable,
        refunds_not_recorded=not_recorded,
    )


def _log_unrecorded(what: str, provider_id: str, charge: Charge, exc: Exception) -> None:
    logger.warning(
        "%s %.80s of charge %s of site %s not recorded: %s: %.300s",
        what, provider_id, charge.pk, charge.order.site_id, type(exc).__name__, exc,
        exc_info=not isinstance(exc, DatabaseError),  # a bug's traceback
    )  # fmt: skip


def _log_unreadable(what: str, item: str, charge: Charge) -> None:
    logger.warning(
        "%s %s of charge %s of site %s not recorded: the rail lists it unreadable",
        what, item, charge.pk, charge.order.site_id,
    )  # fmt: skip
