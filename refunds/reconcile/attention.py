"""Refunds that need attention: telling owners and admins, and an owner's resolution.

A refund lands in ``needs_attention`` when a rail attempt may have moved the money and the
rail cannot say (see :mod:`refunds.execution`). Two things end it: the rail's own answer for
the idempotency key (:func:`check_refund_at_rail`, from the beat task), or an owner recording
what the provider's dashboard shows — "the refund is there, with this id" or "there is no
refund" — which writes a signed ``attention_resolved`` record naming the owner, then settles or
releases the reservation. An id Sill already counts (a refund made outside Sill, or another
of Sill's) is refused: settled under it, one rail refund would count twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import OperationalError, transaction
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from audit.services import append_record
from refunds.execution import (
    RetryLater,
    attention_recheck,
    claim,
    find_at_rail,
    record_result,
    release,
)
from refunds.labels import rail_label, refund_headline, refund_subject
from refunds.models import Refund, RefundStatus
from refunds.services import LeaseLost, fail_refund, refund_body, settle_refund
from sill.accounts.access import Cap, hold_member, require_member
from sill.accounts.models import Role, Site
from sill.accounts.notices import (
    Delivery,
    absolute_url,
    email_members,
    not_backing_off,
    send_claimed,
)
from sill.errors import ExecutionInProgress, SillError
from sill.orders.models import Charge, Customer, ExternalRefund, Order
from sill.rails.base import RailError, RefundResult
from sill.rails.registry import RailDisabled

logger = logging.getLogger(__name__)

PROVIDER_ID_MAX = 255


def attention_refunds_for(site: Site) -> QuerySet[Refund]:
    """The site's refunds that need attention, oldest first (one query with the order)."""
    return (
        Refund.objects.filter(site=site, status=RefundStatus.NEEDS_ATTENTION)
        .select_related("order")
        .order_by("attention_since", "id")
    )


def _notice(refund_id: str) -> str:
    return f"refund-attention:{refund_id}"


def notify_attention(*, refund_id: str) -> bool:
    """Email the owners and admins once; False when already told, no longer flagged, or
    refused.

    A mail server that is down is raised (an ``OSError`` for SMTP), the claim given back: the
    task's retry or the sweep sends it. A server that refuses the message to every owner and
    admin gives the claim back too, but is not raised: the refund waits
    (:func:`sill.accounts.notices.back_off`) while the sweep tells the others. Only the
    error's class and the refund's id are logged, never the addresses or the server's reply.
    """
    claimed = Refund.objects.filter(
        pk=refund_id, status=RefundStatus.NEEDS_ATTENTION, attention_notified_at__isnull=True
    ).update(attention_notified_at=timezone.now())
    if claimed != 1:
        return False
    refund = Refund.objects.select_related("site", "order").get(pk=refund_id)
    return send_claimed(
        notice=_notice(refund.pk),
        what=f"refund {refund.pk}: attention email",
        send=lambda: _email(refund),
        give_back=lambda: Refund.objects.filter(pk=refund.pk).update(attention_notified_at=None),
        log=logger,
    )


# How many untold refunds one sweep emails about, oldest first (the rest on the next).
NOTIFY_SWEEP_LIMIT = 500


def notify_missed_attention() -> int:
    """Email the owners and admins of each refund needing attention they were not told about
    (the on-commit task's message lost, or its retries used up); how many were told. Run by
    the every-minute ``refunds.check_attention``. A refund whose email the server refused is
    skipped while it waits (it neither goes first nor stops the others); a mail server that
    is down ends the run, raised, leaving the rest untold for the next."""
    untold = (
        Refund.objects.filter(
            status=RefundStatus.NEEDS_ATTENTION, attention_notified_at__isnull=True
        )
        .order_by("attention_since", "id")
        .values_list("pk", flat=True)
    )
    due = not_backing_off(
        untold.iterator(chunk_size=NOTIFY_SWEEP_LIMIT),
        notice="refund-attention",
        limit=NOTIFY_SWEEP_LIMIT,
    )
    return sum(notify_attention(refund_id=pk) for pk in due)


def _page_url(refund: Refund) -> str:
    """Where it is resolved: the order page, or a credit's own page (a credit has no order)."""
    if refund.is_credit:
        return absolute_url(reverse("refunds:detail", args=[refund.id]))
    return absolute_url(reverse("orders:detail", args=[refund.order_id]))


def _email(refund: Refund) -> Delivery:
    order = refund.order
    what, held, page = (
        ("A customer credit", "Sill will not send it again while it is in doubt.", "its page")
        if refund.is_credit
        else (
            "A refund",
            "The amount stays reserved, so nobody can refund it twice.",
            "the order page",
        )
    )
    # A refund the rail made but Sill could not record names the rail's id (execution).
    doubt = (
        "made it, and Sill could not record it"
        if refund.provider_refund_id
        else "may have made it, and Sill could not confirm whether it did"
    )
    facts = [
        f"{what} on {refund.site.name} needs attention: {rail_label(refund.rail)} {doubt}.",
        "",
        refund_headline(refund),
        *([f"Order: #{order.number}"] if order else []),
        f"What happened: {refund.failure_message}",
        "",
        f"{held} Sill asks the rail again every few minutes.",
    ]
    look = f"look for idempotency key {refund.idempotency_key}"
    # Only an owner may record the answer (resolve_attention): an admin is asked to look and
    # to fetch an owner, not sent to a form they cannot use.
    delivery = email_members(
        site_id=refund.site_id,
        notice=_notice(refund.pk),
        subject=f"[Sill] Needs attention: {refund_subject(refund)}",
        lines_for={
            Role.OWNER: [
                *facts,
                f"If you can see the answer in the provider's dashboard ({look}), record it on "
                f"{page}:",
                _page_url(refund),
            ],
            Role.ADMIN: [
                *facts,
                "Only an owner can record the answer. If you can see it in the provider's "
                f"dashboard ({look}), ask an owner to record it on {page}:",
                _page_url(refund),
            ],
        },
    )
    if not delivery.told:
        logger.warning(
            "refund %s needs attention; site %s has no owner or admin", refund.id, refund.site_id
        )
    return delivery


@dataclass(frozen=True)
class AttentionAnswer:
    """What an owner says the provider's dashboard shows, checked: ``outcome`` is
    ``refunded`` (with ``provider_refund_id``) or ``not_refunded``."""

    outcome: str
    provider_refund_id: str
    note: str


def parse_attention_answer(
    *, outcome: str, provider_refund_id: str = "", note: str = ""
) -> AttentionAnswer:
    """The form's text as posted, checked (``invalid_field`` naming the field); reads nothing.
    :func:`resolve_attention` checks it again, and the page before it asks to confirm."""
    provider_refund_id = provider_refund_id.strip()
    note = note.strip()[:1000]
    if outcome not in ("refunded", "not_refunded"):
        raise SillError("Choose what the provider's dashboard shows.", code="invalid_field")
    if outcome == "refunded" and not provider_refund_id:
        raise SillError(
            "Enter the provider's refund id, as its dashboard shows it.",
            code="invalid_field",
            field="provider_refund_id",
        )
    if len(provider_refund_id) > PROVIDER_ID_MAX:
        raise SillError(
            "That refund id is too long.", code="invalid_field", field="provider_refund_id"
        )
    return AttentionAnswer(outcome=outcome, provider_refund_id=provider_refund_id, note=note)


class RailRefunded(SillError):
    """The rail confirmed this refund by its id: recording that no refund was made would
    release money the rail has paid out (``rail_refunded``, 409). Nothing was written."""

    code = "rail_refunded"
    status = 409


def resolve_attention(
    *,
    refund: Refund,
    actor: Any,
    outcome: str,
    provider_refund_id: str = "",
    note: str = "",
) -> Refund:
    """An owner records what the provider's dashboard shows for this refund.

    ``actor`` must be an owner of the refund's site (else ``forbidden``, 403), checked again in
    the resolution's transaction (``access.hold_member``). ``outcome`` is
    the form's text as posted: ``refunded`` needs the provider's refund id and settles;
    ``not_refunded`` releases the reservation, refused (``rail_refunded``) for a refund the
    rail confirmed by its id; anything else is ``invalid_field``, and so is a refund id Sill
    already counts (:func:`_refuse_a_counted_id`). Refused while an
    execution holds the refund (``execution_in_progress``). A refusal changes nothing.
    """
    require_member(actor, refund.site_id, Cap.DECIDE_HELD, owner=True)
    answer = parse_attention_answer(
        outcome=outcome, provider_refund_id=provider_refund_id, note=note
    )
    outcome, provider_refund_id, note = answer.outcome, answer.provider_refund_id, answer.note
    token = claim(refund.id, status=RefundStatus.NEEDS_ATTENTION)
    if token is None:
        if Refund.objects.filter(pk=refund.pk, status=RefundStatus.NEEDS_ATTENTION).exists():
            raise ExecutionInProgress(
                "Sill is asking the rail about this refund right now; try again in a minute."
            )
        raise SillError("This refund no longer needs attention.", code="already_resolved")
    try:
        with transaction.atomic():
            # Still an owner now, and until this commits: an owner's removal or demotion of
            # them that came first (it may have waited for the chain behind another append)
            # refuses this; one that comes later waits for it. The member's rows, then the
            # refund, its order and charge, before the append: the append holds the site's
            # chain head until commit, and a decision or settlement on this charge holds the
            # charge while it waits for the head (the lock order of refunds.locks).
            hold_member(actor, refund.site_id, Cap.DECIDE_HELD, owner=True)
            locked = Refund.objects.select_for_update(of=("self",)).get(pk=refund.pk)
            if outcome == "not_refunded" and locked.provider_refund_id:
                raise RailRefunded(
                    f"{rail_label(locked.rail)} made this refund ({locked.provider_refund_id}): "
                    "Sill will not record that no refund was made, which would let the same "
                    "money be refunded again. Sill records it as soon as its books leave room "
                    "for it (see What happened)."
                )
            if not refund.is_credit:
                Order.objects.select_for_update().get(pk=refund.order_id)
                Charge.objects.select_for_update().get(pk=refund.charge_id)
            if outcome == "refunded":
                _refuse_a_counted_id(refund, provider_refund_id)
            append_record(
                site=refund.site,
                kind="attention_resolved",
                body=refund_body(
                    refund,
                    outcome=outcome,
                    provider_refund_id=provider_refund_id or None,
                    resolved_by=actor.get_username(),
                    resolution_note=note or None,
                    resolved_at=timezone.now().isoformat(),
                ),
            )
            if outcome == "refunded":
                settle_refund(
                    refund_id=refund.id,
                    provider_refund_id=provider_refund_id,
                    token=token,
                    resolved_by=actor,
                )
            else:
                fail_refund(
                    refund_id=refund.id,
                    code="not_at_rail",
                    message=(
                        f"{actor.get_username()} recorded that the provider shows no refund "
                        "for this key; nothing moved."
                    ),
                    token=token,
                    resolved_by=actor,
                )
    except BaseException:
        # Still needing attention: the beat task asks the rail again when it was due to.
        release(refund.id, token, retry_at=refund.next_check_at)
        raise
    return Refund.objects.get(pk=refund.pk)


def _refuse_a_counted_id(refund: Refund, provider_refund_id: str) -> None:
    """Refuse (``invalid_field``) a provider refund id Sill already counts: a refund made
    outside Sill recorded on the charge, or another Sill refund of the charge (for a credit,
    another credit of the customer) settled under it.

    The caller holds the locks settlement takes, in its order: the refund, then its order and
    charge; a credit's customer is locked here. An outside refund is recorded under the same
    order and charge locks and skips an id Sill settled (sill.orders.outside), so whichever
    comes second sees the other.
    """
    others = Refund.objects.filter(provider_refund_id=provider_refund_id).exclude(pk=refund.pk)
    noun = "credit" if refund.is_credit else "refund"
    look_for = f"Look for the one with idempotency key {refund.idempotency_key}."
    if refund.is_credit:
        customer_id = refund.customer_id
        assert customer_id is not None  # the database's refund_kind_valid: a credit names one
        Customer.objects.select_for_update().get(pk=customer_id)
        other = others.filter(customer_id=customer_id).first()
        whose = "this customer"
    else:
        if ExternalRefund.objects.filter(
            charge_id=refund.charge_id, provider_refund_id=provider_refund_id
        ).exists():
            raise SillError(
                f"{provider_refund_id} is a refund made outside Sill, already counted on this "
                f"charge: it is not this refund. {look_for}",
                code="invalid_field",
                field="provider_refund_id",
            )
        other = others.filter(charge_id=refund.charge_id).first()
        whose = "this charge"
    if other is not None:
        raise SillError(
            f"{provider_refund_id} is Sill's {noun} {other.id} of {whose}, already recorded: "
            f"it is not this one. {look_for}",
            code="invalid_field",
            field="provider_refund_id",
        )


# --- asking the rail again about a refund that needs attention --------------------------------


def check_refund_at_rail(refund_id: str) -> str:
    """Ask the rail about a ``needs_attention`` refund by its key; act only on its answer.

    ``succeeded``: it exists, settled. ``failed``: the rail says none exists for the key (or
    declined it); the reservation is released. ``unknown``: the rail could not answer (still
    switched off, key rejected, timeout) or the refund is pending; asked again later.
    """
    token = claim(refund_id, status=RefundStatus.NEEDS_ATTENTION)
    if token is None:
        return "not-claimed"
    refund = Refund.objects.select_related("charge", "site", "customer").get(pk=refund_id)
    try:
        try:
            result = find_at_rail(refund)
        except (RailDisabled, RailError) as exc:
            return _still_unknown(refund, token, getattr(exc, "message", str(exc)))
        except Exception as exc:
            logger.exception("refund %s of site %s: lookup failed", refund.id, refund.site_id)
            return _still_unknown(refund, token, f"{type(exc).__name__}: {exc}")
        if result is not None and result.state == "pending":
            return _still_unknown(refund, token, f"{result.provider_refund_id} is still pending")
        return _record_answer(refund, token, result)
    except LeaseLost:
        return "lease-lost"


def _record_answer(refund: Refund, token: str, result: RefundResult | None) -> str:
    """Record the rail's answer: none under the key (failed), or its refund (settled).

    Recording it may fail (a lock timeout on the charge, a lost connection): the execution
    path hands such a failure to its task's retry (``RetryLater``), but this is the beat's
    lookup, which has no retry of its own, and it asks again anyway. So the refund stays as
    it is, the lease given back, and is asked again after the usual interval; one line names
    it and its site for whoever reads the worker's log.
    """
    try:
        if result is None:
            fail_refund(
                refund_id=refund.id,
                code="not_at_rail",
                message=(
                    f"The rail reports no refund for idempotency key {refund.idempotency_key}: "
                    "nothing moved. Refund again if it is still due."
                ),
                token=token,
            )
            return "failed"
        return record_result(refund, token, result)
    except LeaseLost:
        raise
    except Exception as exc:
        answer = "no refund" if result is None else result.provider_refund_id
        error = exc.message if isinstance(exc, RetryLater) else f"{type(exc).__name__}: {exc}"
        logger.warning(
            "refund %s of site %s: the rail's answer (%s) could not be recorded (%s); it still "
            "needs attention and is asked again in %d s",
            refund.id, refund.site_id, answer, error, attention_recheck().total_seconds(),
            # A lock timeout or a lost connection needs no traceback; a bug does (a failed
            # settlement's was logged by record_result).
            exc_info=not isinstance(exc, RetryLater | OperationalError),
        )  # fmt: skip
        Refund.objects.filter(pk=refund.id, lease_token=token).update(
            lease_until=None,
            next_check_at=timezone.now() + attention_recheck(),
            updated_at=timezone.now(),
        )
        return "unknown"


def _still_unknown(refund: Refund, token: str, message: str) -> str:
    Refund.objects.filter(pk=refund.id, lease_token=token).update(
        lease_until=None,
        next_check_at=timezone.now() + attention_recheck(),
        failure_message=message[:500],
        updated_at=timezone.now(),
    )
    return "unknown"


def attention_refund_ids_due(*, now: datetime | None = None) -> list[str]:
    """Refunds that need attention and are due to be asked about again."""
    now = now or timezone.now()
    return list(
        Refund.objects.filter(status=RefundStatus.NEEDS_ATTENTION, next_check_at__lte=now)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .order_by("next_check_at")
        .values_list("id", flat=True)[:500]
    )
