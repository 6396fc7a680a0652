"""Comparing Sill's books for one charge with the refunds the rail lists for it, and Sill's
credits to one customer's balance with the balance transactions the rail lists (pure).

:func:`differences` takes plain rows — Sill's refunds of the charge, the outside refunds Sill
recorded on it before and after the rail was read and synced, and what the rail listed — and
returns every difference, each with a stable ``key``. It imports no ORM: the caller
(:mod:`refunds.reconcile.inbox`) reads the rows and writes the items.

Two snapshots of the outside refunds are compared because the sync
(:func:`sill.rails.charge_sync.sync_charge`) records what Sill had missed before the
comparison runs: a refund that was not in the books *before* and is *after* is one Sill had
missed (its webhook never arrived). Such a difference is reported with ``sill_corrected``:
Sill's books already follow the rail, and a person only acknowledges it. Sill's own refunds
are compared *after* the sync, which reverses a settled refund the rail reports failed.

Refunds still being executed (``processing``) and refunds that need attention are left out:
their execution, or the owner's resolution, records the rail's answer for their key. So are
the refunds Sill settled, failed or opened while the rail was being read
(:func:`changed_during_read`), and the outside refunds a webhook recorded meanwhile (not in the
books before the read): the rail's list is older than them, so "not at the rail" would be
a false alarm; the next run compares them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sill.money import Money, MoneyError, format_money
from sill.rails.base import RailRefund, rail_label

# Rail refund states in which the money went (or is going) back to the buyer.
COUNTED_STATES = frozenset({"pending", "requires_action", "succeeded"})
# Sill refund statuses whose execution owns the rail's answer.
IN_FLIGHT = frozenset({"processing", "needs_attention"})
# Sill refund statuses that count nothing as refunded.
NOT_REFUNDED = frozenset({"failed", "held", "rejected", "expired"})

MISSING_IN_SILL = "missing_in_sill"
MISSING_AT_RAIL = "missing_at_rail"
AMOUNT_DIFFERS = "amount_differs"
STATUS_DIFFERS = "status_differs"


@dataclass(frozen=True)
class SillRefundRow:
    refund_id: str
    provider_refund_id: str
    status: str
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class OutsideRow:
    provider_refund_id: str
    amount_minor: int
    currency: str
    status: str

    @property
    def counted(self) -> bool:
        return self.status in COUNTED_STATES


@dataclass(frozen=True)
class DisputeRow:
    """A dispute Sill holds for a charge (``status``: Sill's word; ``status_label`` in words)."""

    provider_dispute_id: str
    amount_minor: int | None  # None (currency ""): the rail's amount could not be read
    currency: str
    status_label: str
    rail_status: str


@dataclass(frozen=True)
class Difference:
    kind: str
    subject: str  # Sill's refund id, or the provider's refund id for outside refunds
    detail: str
    currency: str
    refund_id: str = ""
    provider_refund_id: str = ""
    sill_amount_minor: int | None = None
    rail_amount_minor: int | None = None
    rail_currency: str = ""
    sill_status: str = ""
    rail_status: str = ""
    sill_corrected: bool = False

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.subject}"


def differences(
    *,
    rail: str,
    currency: str,
    listed: Sequence[RailRefund],
    sill: Iterable[SillRefundRow],
    outside_before: Mapping[str, OutsideRow],
    outside_after: Mapping[str, OutsideRow],
    changing: Collection[str] = frozenset(),
    not_recorded: Collection[str] = frozenset(),
) -> list[Difference]:
    """Every difference between the books of one charge (in ``currency``) and ``listed``.

    ``changing``: Sill's refunds whose state changed while the rail was read
    (:func:`changed_during_read`), left out like those in flight. ``not_recorded``: rail ids
    the sync could not record for another reason than the charge's room
    (``ChargeSync.refunds_not_recorded``)."""
    rail_name = rail_label(rail)
    by_provider = {r.provider_refund_id: r for r in listed}
    by_sill_id = {r.sill_refund_id: r for r in listed if r.sill_refund_id}
    matched: set[str] = set()
    found: list[Difference] = []
    sill_ids: dict[str, str] = {}  # Sill's refund id → the provider id Sill recorded

    for own in sill:
        sill_ids[own.refund_id] = own.provider_refund_id
        at_rail = _match(own, by_provider, by_sill_id)
        if at_rail is not None:
            matched.add(at_rail.provider_refund_id)
        if own.status in IN_FLIGHT or own.refund_id in changing:
            continue
        found.extend(_own_refund(own, at_rail, rail_name))

    for listed_refund in listed:
        if listed_refund.provider_refund_id in matched:
            continue
        if listed_refund.sill_refund_id:
            if not _counted(listed_refund):
                continue
            if listed_refund.sill_refund_id not in sill_ids:
                found.append(_unknown_own(listed_refund, currency, rail_name))
            else:
                # Sill's refund is matched to another rail refund: this one is a second
                # refund for it, which Sill does not count.
                found.append(
                    _second_own(
                        listed_refund,
                        sill_ids[listed_refund.sill_refund_id],
                        currency,
                        rail_name,
                    )
                )
            continue
        found.extend(
            _outside(
                listed_refund,
                outside_before.get(listed_refund.provider_refund_id),
                outside_after.get(listed_refund.provider_refund_id),
                currency,
                rail_name,
                failed_to_record=listed_refund.provider_refund_id in not_recorded,
            )
        )

    for recorded in outside_after.values():
        if recorded.provider_refund_id not in outside_before:
            # Recorded while the rail was read (the sync records only what it listed): a
            # webhook's refund made after the read, which the rail's list cannot hold yet.
            continue
        if recorded.provider_refund_id not in by_provider and recorded.counted:
            found.append(
                Difference(
                    kind=MISSING_AT_RAIL,
                    subject=recorded.provider_refund_id,
                    provider_refund_id=recorded.provider_refund_id,
                    currency=recorded.currency,
                    sill_amount_minor=recorded.amount_minor,
                    sill_status=recorded.status,
                    detail=(
                        f"Sill counts this refund made outside Sill, but {rail_name} no longer "
                        "lists it for the charge. It still lowers what is refundable."
                    ),
                )
            )
    return found


def changed_during_read(
    before: Iterable[SillRefundRow], after: Iterable[SillRefundRow]
) -> set[str]:
    """Sill's refunds of a charge that changed between the two reads of its books, taken
    before and after the rail's list: opened, settled, failed or reversed meanwhile.

    What the rail listed is older than such a change (a refund settled after the list was
    read is not in it), so comparing them would report a refund the buyer got back as "not at
    the rail". The sync's own reversals are among them too; they agree with the rail."""
    was = {r.refund_id: (r.status, r.provider_refund_id) for r in before}
    return {r.refund_id for r in after if was.get(r.refund_id) != (r.status, r.provider_refund_id)}


def missed_disputes(
    *, rail: str, currency: str, before: set[str], after: Iterable[DisputeRow]
) -> list[Difference]:
    """The disputes the sync recorded that Sill had not (in ``after``, not in ``before``): each
    a difference Sill has already corrected, left for a person to acknowledge, since a missed
    dispute webhook is worth a look (and refunds of the charge were allowed meanwhile).

    ``currency``: the charge's, the item's own as for every difference of the charge; the
    dispute's amount is the rail's side, in its own currency (PayPal states it in the buyer's,
    which may be another), never taken as the charge's."""
    rail_name = rail_label(rail)
    return [
        Difference(
            kind=MISSING_IN_SILL,
            subject=dispute.provider_dispute_id,
            currency=currency,
            rail_amount_minor=dispute.amount_minor,
            rail_currency=dispute.currency,
            rail_status=dispute.rail_status,
            sill_corrected=True,
            detail=(
                f"A dispute at {rail_name} ({dispute.provider_dispute_id}, "
                f"{dispute.status_label.lower()}) that Sill had not recorded: its webhook was "
                "missed or had not arrived yet. It is recorded now, and while it is open every "
                "refund of the charge is refused." + _amount_words(dispute, currency, rail_name)
            ),
        )
        for dispute in after
        if dispute.provider_dispute_id and dispute.provider_dispute_id not in before
    ]


def _amount_words(dispute: DisputeRow, currency: str, rail_name: str) -> str:
    if dispute.amount_minor is None:
        return f" {rail_name} did not give its amount in a form Sill can read: it is not known."
    if dispute.currency == currency:
        return ""
    return (
        f" Its amount, {_money(dispute.amount_minor, dispute.currency)}, in another currency "
        f"than the charge's ({currency}), is not compared with the charge."
    )


def credit_differences(
    *, rail: str, listed: Sequence[RailRefund], sill: Iterable[SillRefundRow]
) -> list[Difference]:
    """Every difference between Sill's credits to one customer's balance and the balance
    transactions the rail lists for that customer (``CreditReader.list_credits``).

    A transaction whose metadata names no Sill credit (an invoice paid from the balance, the
    merchant's own adjustment in the dashboard) is not Sill's, and is not compared. A balance
    transaction takes effect when it is made, so the only states are "made" and "not made".
    """
    rail_name = rail_label(rail)
    by_provider = {r.provider_refund_id: r for r in listed}
    by_sill_id = {r.sill_refund_id: r for r in listed if r.sill_refund_id}
    matched: set[str] = set()
    found: list[Difference] = []
    sill_ids: dict[str, str] = {}  # Sill's credit id → the transaction id Sill recorded
    for own in sill:
        sill_ids[own.refund_id] = own.provider_refund_id
        at_rail = _match(own, by_provider, by_sill_id)
        if at_rail is not None:
            matched.add(at_rail.provider_refund_id)
        if own.status not in IN_FLIGHT:
            found.extend(_own_credit(own, at_rail, rail_name))
    # Every transaction naming a Sill credit, not one per credit: a second transaction for
    # a credit Sill matched to another is a second credit to the customer.
    for txn in listed:
        if not txn.sill_refund_id or txn.provider_refund_id in matched:
            continue
        if txn.sill_refund_id in sill_ids:
            held = sill_ids[txn.sill_refund_id] or f"another {rail_name} balance transaction"
            why = (
                f"which Sill holds as {held}, so Sill does not count this one as credited: "
                "the customer may be credited twice."
            )
        else:
            why = (
                "which Sill does not have for this customer, so Sill does not count it as credited."
            )
        found.append(
            Difference(
                kind=MISSING_IN_SILL,
                subject=txn.provider_refund_id,
                provider_refund_id=txn.provider_refund_id,
                currency=txn.currency,
                rail_amount_minor=txn.amount_minor,
                rail_currency=txn.currency,
                rail_status=txn.status,
                detail=(
                    f"{rail_name}'s balance transaction names Sill credit "
                    f"{txn.sill_refund_id}, {why}"
                ),
            )
        )
    return found


def _own_credit(own: SillRefundRow, at_rail: RailRefund | None, rail: str) -> list[Difference]:
    """Differences of one of Sill's settled, failed or never-sent customer credits."""
    base = _own_base(own, at_rail)
    if own.status == "succeeded":
        if at_rail is None:
            return [
                Difference(
                    kind=MISSING_AT_RAIL,
                    **base,
                    detail=(
                        "Sill settled this credit as "
                        f"{own.provider_refund_id or 'no transaction id'}, but {rail} lists no "
                        "such balance transaction for the customer: the customer's balance may "
                        "not have been credited."
                    ),
                )
            ]
        return _settled_against(
            own,
            at_rail,
            base,
            other_id=(
                f"Sill settled this credit as {own.provider_refund_id}, but {rail}'s balance "
                f"transaction for it is {at_rail.provider_refund_id}."
            ),
            amounts=(
                f"Sill credited {_money(own.amount_minor, own.currency)}; {rail}'s balance "
                f"transaction credits {_money(at_rail.amount_minor, at_rail.currency)}."
            ),
        )
    if own.status in NOT_REFUNDED and at_rail is not None:
        return [
            Difference(
                kind=STATUS_DIFFERS,
                **base,
                detail=(
                    f"Sill counts nothing for this credit ({own.status}), but {rail} credited "
                    "the customer's balance: the customer may be credited twice."
                ),
            )
        ]
    return []


def _settled_against(
    own: SillRefundRow, at_rail: RailRefund, base: dict[str, Any], *, other_id: str, amounts: str
) -> list[Difference]:
    """What a refund or credit Sill settled and the rail lists can differ in beside its status:
    another provider id than the one Sill recorded, another amount or currency."""
    found = []
    if own.provider_refund_id and own.provider_refund_id != at_rail.provider_refund_id:
        found.append(Difference(kind=MISSING_AT_RAIL, **base, detail=other_id))
    if (at_rail.amount_minor, at_rail.currency) != (own.amount_minor, own.currency):
        found.append(Difference(kind=AMOUNT_DIFFERS, **base, detail=amounts))
    return found


def _match(
    own: SillRefundRow,
    by_provider: Mapping[str, RailRefund],
    by_sill_id: Mapping[str, RailRefund],
) -> RailRefund | None:
    """What the rail lists for one of Sill's own: by the provider's id Sill recorded, else by
    the Sill id the rail's metadata carries."""
    at_rail = by_provider.get(own.provider_refund_id) if own.provider_refund_id else None
    return at_rail or by_sill_id.get(own.refund_id)


def _own_base(own: SillRefundRow, at_rail: RailRefund | None) -> dict[str, Any]:
    """The fields every difference of one of Sill's own refunds or credits carries."""
    base: dict[str, Any] = {
        "subject": own.refund_id,
        "refund_id": own.refund_id,
        "currency": own.currency,
        "sill_amount_minor": own.amount_minor,
        "sill_status": own.status,
    }
    if at_rail is not None:
        base |= {
            "provider_refund_id": at_rail.provider_refund_id,
            "rail_amount_minor": at_rail.amount_minor,
            "rail_currency": at_rail.currency,
            "rail_status": at_rail.status,
        }
    else:
        base["provider_refund_id"] = own.provider_refund_id
    return base


def _own_refund(own: SillRefundRow, at_rail: RailRefund | None, rail: str) -> list[Difference]:
    """Differences of one of Sill's settled, failed or never-sent refunds."""
    base = _own_base(own, at_rail)
    if own.status == "succeeded":
        if at_rail is None:
            return [
                Difference(
                    kind=MISSING_AT_RAIL,
                    **base,
                    detail=(
                        f"Sill settled this refund as {own.provider_refund_id or 'no refund id'}, "
                        f"but {rail} lists no such refund for the charge: the buyer may not "
                        "have been paid back."
                    ),
                )
            ]
        found = _settled_against(
            own,
            at_rail,
            base,
            other_id=(
                f"Sill settled this refund as {own.provider_refund_id}, but {rail}'s refund "
                f"for its idempotency key is {at_rail.provider_refund_id}."
            ),
            amounts=(
                f"Sill settled {_money(own.amount_minor, own.currency)}; {rail} refunded "
                f"{_money(at_rail.amount_minor, at_rail.currency)}."
            ),
        )
        if not _counted(at_rail):
            found.append(
                Difference(
                    kind=STATUS_DIFFERS,
                    **base,
                    detail=(
                        f"Sill settled this refund, but {rail} reports it {at_rail.status}: "
                        "the money did not reach the buyer."
                    ),
                )
            )
        elif at_rail.status != "succeeded":
            found.append(
                Difference(
                    kind=STATUS_DIFFERS,
                    **base,
                    detail=(
                        f"Sill settled this refund, but {rail} has not finished it "
                        f"({at_rail.status})."
                    ),
                )
            )
        return found
    if own.status in NOT_REFUNDED and at_rail is not None and _counted(at_rail):
        return [
            Difference(
                kind=STATUS_DIFFERS,
                **base,
                detail=(
                    f"Sill counts nothing for this refund ({own.status}), but {rail} made it "
                    f"({at_rail.status}): the charge may be refunded twice."
                ),
            )
        ]
    return []


def _unknown_own(listed: RailRefund, currency: str, rail: str) -> Difference:
    return Difference(
        kind=MISSING_IN_SILL,
        subject=listed.provider_refund_id,
        provider_refund_id=listed.provider_refund_id,
        currency=currency,
        rail_amount_minor=listed.amount_minor,
        rail_currency=listed.currency,
        rail_status=listed.status,
        detail=(
            f"{rail}'s refund names Sill refund {listed.sill_refund_id}, which Sill does not "
            "have on this charge, so Sill does not count it as refunded."
        ),
    )


def _second_own(listed: RailRefund, counted_as: str, currency: str, rail: str) -> Difference:
    other = counted_as or f"another {rail} refund"
    return Difference(
        kind=MISSING_IN_SILL,
        subject=listed.provider_refund_id,
        provider_refund_id=listed.provider_refund_id,
        currency=currency,
        rail_amount_minor=listed.amount_minor,
        rail_currency=listed.currency,
        rail_status=listed.status,
        detail=(
            f"{rail}'s refund names Sill refund {listed.sill_refund_id}, which Sill holds as "
            f"{other}, so Sill does not count this one as refunded: the charge may be "
            "refunded twice."
        ),
    )


def _outside(
    listed: RailRefund,
    before: OutsideRow | None,
    after: OutsideRow | None,
    currency: str,
    rail: str,
    *,
    failed_to_record: bool = False,
) -> list[Difference]:
    """Differences of one refund made at the rail outside Sill; ``failed_to_record``: the sync
    could not record it for another reason than the charge's room."""
    follows = after is not None and (after.amount_minor, after.currency, after.status) == (
        listed.amount_minor,
        listed.currency,
        listed.status,
    )
    base: dict[str, Any] = {
        "subject": listed.provider_refund_id,
        "provider_refund_id": listed.provider_refund_id,
        "currency": currency,
        "rail_amount_minor": listed.amount_minor,
        "rail_currency": listed.currency,
        "rail_status": listed.status,
        "sill_corrected": follows,
    }
    if before is None:
        if not _counted(listed) or listed.amount_minor <= 0:
            # Failed at the rail, or no money returned (Shopify: items restocked only), and
            # never recorded: nothing to count.
            return []
        if follows:
            done = (
                "it is recorded now as a refund outside Sill, so it no longer counts as refundable."
            )
        elif listed.currency != currency:
            done = "Sill could not record it (another currency than the charge's)."
        elif failed_to_record:
            # Not the charge's room: the books would have held it. Said as it is, and the
            # worker's log names the error (sill.rails.charge_sync).
            done = (
                "Sill could not record it (saving it failed; the worker's log names the error), "
                "so it still counts as refundable in Sill until a later check records it."
            )
        else:
            done = (
                "Sill could not record it: with the refunds Sill counts it would exceed the "
                "charge, so Sill's books count a refund the rail does not have."
            )
        return [
            Difference(
                kind=MISSING_IN_SILL,
                **base,
                detail=(
                    f"Refunded at {rail} outside Sill, and Sill had not recorded it (its webhook "
                    f"was missed or had not arrived yet): {done}"
                ),
            )
        ]
    base |= {"sill_amount_minor": before.amount_minor, "sill_status": before.status}
    now = " Sill's record now follows the rail." if follows else ""
    if (before.amount_minor, before.currency) != (listed.amount_minor, listed.currency):
        return [
            Difference(
                kind=AMOUNT_DIFFERS,
                **base,
                detail=(
                    f"Sill had recorded {_money(before.amount_minor, before.currency)} for this "
                    f"refund made outside Sill; {rail} reports "
                    f"{_money(listed.amount_minor, listed.currency)}.{now}"
                ),
            )
        ]
    if before.counted != _counted(listed):
        return [
            Difference(
                kind=STATUS_DIFFERS,
                **base,
                detail=(
                    f"Sill had this refund made outside Sill as {before.status}; {rail} reports "
                    f"it {listed.status}.{now}"
                ),
            )
        ]
    return []


def _counted(refund: RailRefund) -> bool:
    return refund.status in COUNTED_STATES


def _money(amount_minor: int, currency: str) -> str:
    try:
        return format_money(Money(amount_minor, currency))
    except MoneyError:
        return f"{amount_minor} {currency} (minor units)"
