"""A purchase's charge that needs attention, settled by an owner from the rail's dashboard.

A charge needs attention when its last attempt ended without the rail's answer
(:mod:`sill.orders.charging`): it stays pending and the sweep looks it up at the rail every
``SILL_CHARGE_ATTENTION_RECHECK_SECONDS``. When the rail can never answer (switched off, or its
lookup cannot find the payment), only a person can end it: an owner records what the rail's
dashboard shows for the idempotency key ``sill-charge-<order id>``. *Charged*, with the rail's
charge (or payment) id: the charge succeeds and the order is paid. *Not charged*: the charge
fails and the order is cancelled. Either way a signed ``attention_resolved`` record names the
owner, with their note.

The resolution claims the charge's lease like any attempt (counting none), so it never races
a worker's attempt or the sweep's lookup: while one holds the charge it is refused
(``execution_in_progress``). Then it takes the order's and the charge's row locks, and appends
last (the lock order of every money path: order, charge, the site's chain head). An id another
charge already holds is refused (``invalid_field``): recorded twice, one payment at the rail
would be counted, and refunded, as two. A refusal changes nothing.

The site's owners and admins (active accounts) are told once, by email, when a charge first
needs attention (:func:`notify_charge_attention`): ``charging`` enqueues it on the commit that
flagged the charge, and the every-minute sweep (``orders.recover_stuck``) sends any the first
path missed. Both claim the charge's ``attention_notified_at`` by conditional UPDATE before
sending (one caller wins it, in any process) and give it back if the email fails, so a retry
sends it (to those not told yet: each hears once) and the other path sends nothing. The same
people as a refund that needs attention (``refunds.reconcile.attention``), each in words for
their role: an owner is asked to record the answer; an admin cannot, but sees the charge on
the dashboard and the order page, so is asked to look in the rail's dashboard and fetch an
owner. A server refusing the email (every recipient's message) does not stop the sweep: that
charge waits, backing off, while the others are told (:mod:`sill.accounts.notices`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from audit.services import append_record
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Role
from sill.accounts.notices import (
    Delivery,
    absolute_url,
    email_members,
    not_backing_off,
    send_claimed,
)
from sill.errors import ExecutionInProgress, SillError
from sill.money import format_money
from sill.orders.charge_lease import claim_charge, locked_for_update, release_charge
from sill.orders.charging import attention_recheck, charge_body, settle_charge
from sill.orders.models import Charge, ChargeStatus, Order
from sill.rails.base import rail_label

logger = logging.getLogger(__name__)

CHARGED = "charged"
NOT_CHARGED = "not_charged"
PROVIDER_ID_MAX = 255  # Charge.provider_charge_id and provider_payment_id
NOTE_MAX = 1000
SWEEP_LIMIT = 500


@dataclass(frozen=True)
class ChargeResolution:
    """What an owner says the rail's dashboard shows, checked (:func:`parse_resolution`)."""

    outcome: str  # CHARGED or NOT_CHARGED
    provider_charge_id: str = ""
    provider_payment_id: str = ""
    note: str = ""

    @property
    def charged(self) -> bool:
        return self.outcome == CHARGED


def parse_resolution(
    *, outcome: str, provider_charge_id: str = "", provider_payment_id: str = "", note: str = ""
) -> ChargeResolution:
    """The owner's form as posted, checked; ``invalid_field`` naming the field otherwise.

    *Charged* needs the charge id or the payment id as the dashboard shows it (Stripe's
    ``ch_…`` / ``pi_…``): at most 255 characters, no spaces. Ids and note are stripped.
    """
    charge_id = provider_charge_id.strip()
    payment_id = provider_payment_id.strip()
    note = note.strip()
    if outcome not in (CHARGED, NOT_CHARGED):
        raise SillError(
            "Choose what the rail's dashboard shows: charged or not charged.",
            code="invalid_field",
            field="outcome",
        )
    if outcome == NOT_CHARGED:
        charge_id = payment_id = ""  # nothing was charged: no id to record
    elif not (charge_id or payment_id):
        raise SillError(
            "Enter the charge id (or the payment id) as the rail's dashboard shows it.",
            code="invalid_field",
            field="provider_charge_id",
        )
    for field, noun, value in (
        ("provider_charge_id", "charge id", charge_id),
        ("provider_payment_id", "payment id", payment_id),
    ):
        if len(value) > PROVIDER_ID_MAX:
            raise SillError(
                f"That {noun} is too long: a rail's ids are at most {PROVIDER_ID_MAX} characters.",
                code="invalid_field",
                field=field,
            )
        if any(c.isspace() or not c.isprintable() for c in value):
            raise SillError(
                f"That {noun} does not look like an id: copy it from the dashboard as it is "
                "shown, without spaces.",
                code="invalid_field",
                field=field,
            )
    if len(note) > NOTE_MAX:
        raise SillError(
            f"The note is too long: at most {NOTE_MAX:,} characters.",
            code="invalid_field",
            field="note",
        )
    return ChargeResolution(
        outcome=outcome, provider_charge_id=charge_id, provider_payment_id=payment_id, note=note
    )


def idempotency_key(order: Order) -> str:
    return f"sill-charge-{order.pk}"


def resolve_charge_attention(
    *,
    charge: Charge,
    actor: Any,
    outcome: str,
    provider_charge_id: str = "",
    provider_payment_id: str = "",
    note: str = "",
) -> Charge:
    """An owner records what the rail's dashboard shows for ``charge``; returns it settled.

    ``actor`` must be an owner of the charge's site (else ``forbidden``, 403), checked again in
    the resolution's transaction (``access.hold_member``). The form's text
    goes through :func:`parse_resolution`. Refused: ``execution_in_progress`` (409) while a
    worker or the sweep holds the charge, ``already_resolved`` (409) when it does not need
    attention (any more), ``invalid_field`` for bad input or an id another charge holds.
    """
    site_id = Order.objects.filter(pk=charge.order_id).values_list("site_id", flat=True).first()
    require_member(actor, site_id or "", Cap.DECIDE_HELD, owner=True)
    resolution = parse_resolution(
        outcome=outcome,
        provider_charge_id=provider_charge_id,
        provider_payment_id=provider_payment_id,
        note=note,
    )
    token = claim_charge(charge.pk, attempt=False)
    if token is None:
        if Charge.objects.filter(pk=charge.pk, status=ChargeStatus.PENDING).exists():
            raise ExecutionInProgress(
                "Sill is asking the rail about this charge right now; try again in a minute."
            )
        raise _already_resolved()
    try:
        with transaction.atomic():
            # Still an owner now, and until this commits: an owner's removal or demotion of
            # them that came first (it may have waited for the chain behind another append)
            # refuses this; one that comes later waits for it. The member's rows first, then
            # the order and the charge (the lock order of refunds.locks).
            hold_member(actor, site_id or "", Cap.DECIDE_HELD, owner=True)
            order, locked, holds = locked_for_update(charge.pk, token)
            if not holds:  # the lease lapsed and a worker took it over
                raise ExecutionInProgress(
                    "Sill is asking the rail about this charge right now; try again in a minute."
                )
            if locked.attention_since is None:
                raise _already_resolved(still_trying=True)
            settled = _settle(order, locked, resolution, actor)
            append_record(
                site=order.site,
                kind="attention_resolved",
                body={
                    **charge_body(
                        order,
                        settled,
                        outcome=resolution.outcome,
                        message=settled.failure_message,
                    ),
                    "resolved_by": actor.get_username(),
                    "resolution_note": resolution.note or None,
                    "resolved_at": timezone.now().isoformat(),
                },
            )
    except BaseException:
        # Still pending and needing attention: the sweep asks the rail again when it was due.
        release_charge(charge.pk, token)
        raise
    return settled


def _already_resolved(*, still_trying: bool = False) -> SillError:
    message = (
        "This charge does not need attention: Sill is still trying it."
        if still_trying
        else "This charge no longer needs attention."
    )
    return SillError(message, code="already_resolved", status=409)


def _settle(order: Order, charge: Charge, resolution: ChargeResolution, actor: Any) -> Charge:
    """Settle the locked charge as the owner said; refuses (``invalid_field``) an id another
    charge holds. Runs under the order's and the charge's row locks, before the append."""
    if not resolution.charged:
        return settle_charge(
            order=order,
            charge=charge,
            succeeded=False,
            provider_payment_id=charge.provider_payment_id,
            failure_message=(
                f"{actor.get_username()} recorded that {rail_label(charge.rail)} shows no "
                f"charge for idempotency key {idempotency_key(order)}: nothing was charged, "
                "and the order is cancelled."
            ),
        )
    charge_id = resolution.provider_charge_id or charge.provider_charge_id
    payment_id = resolution.provider_payment_id or charge.provider_payment_id
    _refuse_a_held_id(order, charge, charge_id=charge_id, payment_id=payment_id)
    try:
        # A savepoint: the unique constraint may still refuse an id another charge took since
        # the check (a store's sync, another owner), and the transaction must stay usable.
        with transaction.atomic():
            return settle_charge(
                order=order,
                charge=charge,
                succeeded=True,
                provider_payment_id=payment_id,
                provider_charge_id=charge_id,
                captured_at=timezone.now(),
            )
    except IntegrityError:
        raise SillError(
            f"{charge_id} is already recorded on another charge: it is not this one. "
            f"{_look_for(order)}",
            code="invalid_field",
            field="provider_charge_id",
        ) from None


def _look_for(order: Order) -> str:
    return f"Look for the payment with idempotency key {idempotency_key(order)}."


def _refuse_a_held_id(order: Order, charge: Charge, *, charge_id: str, payment_id: str) -> None:
    """Refuse an id that is not this charge's: one another charge of the rail holds (any
    site's: the database allows one charge per rail charge id; another site's is not named),
    or a payment id other than the one the rail already named for this charge."""
    if payment_id and charge.provider_payment_id and payment_id != charge.provider_payment_id:
        raise SillError(
            f"{rail_label(charge.rail)} named this charge's payment "
            f"{charge.provider_payment_id}; {payment_id} is another payment. {_look_for(order)}",
            code="invalid_field",
            field="provider_payment_id",
        )
    others = Charge.objects.filter(rail=charge.rail).exclude(pk=charge.pk)
    for field, noun, value in (
        ("provider_charge_id", "charge", charge_id),
        ("provider_payment_id", "payment", payment_id),
    ):
        if not value:
            continue
        other = others.filter(**{field: value}).select_related("order").first()
        if other is None:
            continue
        whose = (
            f"the {noun} of order #{other.order.number}"
            if other.order.site_id == order.site_id
            else f"already recorded on another {noun}"
        )
        raise SillError(
            f"{value} is {whose}: it is not this one. {_look_for(order)}",
            code="invalid_field",
            field=field,
        )


# --- telling the owners and admins -------------------------------------------------------------


def _notice(charge_id: str) -> str:
    return f"charge-attention:{charge_id}"


def notify_charge_attention(*, charge_id: str) -> bool:
    """Email the site's owners and admins that the charge needs attention, once; False when
    already told, no longer needing attention, or refused.

    A mail server that is down is raised (an ``OSError`` for SMTP), the claim given back: the
    task's retry or the sweep sends it. A server that refuses the message to every owner and
    admin (their addresses, or the message) gives the claim back too, but is not raised: the
    charge waits (:func:`sill.accounts.notices.back_off`) while the sweep tells the others.
    Only the error's class and the charge's id are logged, never the addresses or the
    server's reply.
    """
    claimed = Charge.objects.filter(
        pk=charge_id,
        status=ChargeStatus.PENDING,
        attention_since__isnull=False,
        attention_notified_at__isnull=True,
    ).update(attention_notified_at=timezone.now())
    if claimed != 1:
        return False
    charge = Charge.objects.select_related("order__site").get(pk=charge_id)
    return send_claimed(
        notice=_notice(charge_id),
        what=f"charge {charge_id}: attention email",
        send=lambda: _email_deciders(charge),
        give_back=lambda: Charge.objects.filter(pk=charge_id).update(attention_notified_at=None),
        log=logger,
    )


def untold_attention_charge_ids() -> list[str]:
    """Charges that need attention nobody was told of yet, oldest first, but for those waiting
    after the mail server refused their email (the sweep's pick)."""
    untold = (
        Charge.objects.filter(
            status=ChargeStatus.PENDING,
            attention_since__isnull=False,
            attention_notified_at__isnull=True,
        )
        .order_by("attention_since", "id")
        .values_list("pk", flat=True)
    )
    return not_backing_off(
        untold.iterator(chunk_size=SWEEP_LIMIT),
        notice="charge-attention",
        limit=SWEEP_LIMIT,
    )


def notify_missed_charge_attention() -> int:
    """The sweep: tell the owners and admins of each charge the on-commit task missed; how
    many told. A refused email skips its charge; a mail server that is down ends the run,
    raised, leaving the rest untold for the next."""
    return sum(notify_charge_attention(charge_id=pk) for pk in untold_attention_charge_ids())


def _charge_page_url(charge: Charge) -> str:
    """The charge on its order page, where an owner records what the rail's dashboard shows."""
    return absolute_url(reverse("orders:detail", args=[charge.order_id]) + f"#charge-{charge.pk}")


def _email_deciders(charge: Charge) -> Delivery:
    order = charge.order
    rail = rail_label(charge.rail)
    amount = format_money(charge.amount)
    buyer = ", ".join(part for part in (order.buyer_name, order.buyer_email) if part)
    every = max(1, round(attention_recheck().total_seconds() / 60))
    key = idempotency_key(order)
    facts = [
        f"A charge on {order.site.name} needs attention: {rail} may have charged the buyer, "
        "and Sill could not confirm whether it did.",
        "",
        f"Order: #{order.number}" + (f" ({buyer})" if buyer else ""),
        f"Amount: {amount} on {rail}",
        f"What happened: {charge.attention_reason}",
        "",
        "The order stays pending, not cancelled, while the buyer may have been charged. Sill "
        f"asks {rail} again every {every} minutes.",
    ]
    url = _charge_page_url(charge)
    # Only an owner may record the answer (resolve_charge_attention): an admin is asked to
    # look and to fetch an owner, not sent to a form they cannot use.
    delivery = email_members(
        site_id=order.site_id,
        notice=_notice(charge.pk),
        subject=f"[Sill] Needs attention: a {amount} charge for order #{order.number}",
        lines_for={
            Role.OWNER: [
                *facts,
                f"If you can see the answer in {rail}'s dashboard (look for idempotency key "
                f"{key}), record it on the order page:",
                url,
            ],
            Role.ADMIN: [
                *facts,
                f"Only an owner can record the answer. If you can see it in {rail}'s dashboard "
                f"(look for idempotency key {key}), ask an owner to record it on the order "
                "page:",
                url,
            ],
        },
    )
    if not delivery.told:
        logger.warning(
            "charge %s needs attention; site %s has no owner or admin", charge.pk, order.site_id
        )
    return delivery
