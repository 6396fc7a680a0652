"""Idempotency keys for staff refunds: one refund per key, whatever the client retries.

The staff API takes an ``Idempotency-Key`` header and the order-page form a hidden field with a
fresh random key per rendered form. A key belongs to one member on one site (it never collides
with another member's, nor across sites) and is kept for :data:`KEEP_FOR` after its last use.

How a request runs under a key (:func:`run_idempotently`):

1. **Claim** by INSERT, in its own short transaction, before any work: the unique (site, user,
   key) constraint is the lock. If the key is taken, the existing record decides: another
   fingerprint → ``422 idempotency_conflict``; done → the stored response is answered again
   (``replayed``); in flight → ``409 idempotency_in_flight``.
2. **Work**: the refund pipeline runs with a hook that links the record to the refund *inside
   the refund's own transaction*. The work is not wrapped in an outer transaction: the staff
   pipeline reads the rail's facts before it opens its transaction, and those network calls
   must not hold a transaction (SQLite's write lock) open.
3. **Store** the response once the refund committed (the answer the caller got, with the
   refund's status as it stands after commit), in the same conditional UPDATE that marks the
   record done.

Crashes: a record whose request died stays in flight. After :data:`ABANDONED_AFTER` without
an answer it counts as abandoned: if it is linked to a refund, the refund was made and the
next request stores and answers that refund's response; if not, nothing was made and the
next request takes the claim over (a new fencing token: the old request, if it was only slow,
can no longer link a refund, which rolls its refund back).

Which refusals are stored: every answer the pipeline gives once the key is claimed (an
``exceeds_refundable``, ``order_changed``, ``order_not_refundable``, an inactive reason), so a
replay answers the same even if the order changed since. Not stored, and the key released so
that a retry with the same key runs again: refusals that say nothing was decided and a retry
may succeed (:data:`RETRYABLE_CODES` such as ``rail_disabled``, 429 and 5xx, any exception
that is not a ``SillError``, and :class:`NothingDecided`). Bodies refused by the caller's own
validation before the claim (``malformed``, a missing field) store nothing either.

Expired records are removed when the same key is claimed again, and in small batches on
every successful claim (:func:`purge_expired_idempotency_records`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import rfc8785
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from refunds.models import IdempotencyRecord, IdempotencyState, Refund
from sill.accounts.models import Site
from sill.errors import SillError

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_MAX = 255
KEEP_FOR = timedelta(hours=24)
# An in-flight record older than this is a crashed request's (a staff refund answers in
# seconds); past it, the next request with the key takes over.
ABANDONED_AFTER = timedelta(seconds=60)
PURGE_BATCH = 200
POLL_SECONDS = 0.1
# Also the access lost while the refund was decided (the member removed or demoted, their
# token revoked: refunds.staff.services): access is checked before a key is claimed, and a
# refusal of it is never the key's answer.
RETRYABLE_CODES = frozenset(
    {"rail_disabled", "rail_secret_unreadable", "forbidden", "not_authenticated"}
)

_KEY_RE = re.compile(rf"[\x20-\x7e]{{1,{KEY_MAX}}}")
_MAX_DEPTH = 64
_SAFE_INT = 2**53 - 1


class IdempotencyConflict(SillError):
    code = "idempotency_conflict"
    status = 422


class IdempotencyInFlight(SillError):
    code = "idempotency_in_flight"
    status = 409


class NothingDecided(SillError):
    """Raised by work that stopped before deciding anything: the key is released, not stored."""


@dataclass(frozen=True)
class IdempotentResponse:
    """The answer to give: ``status`` and JSON ``body``; ``replayed`` when it was stored before."""

    status: int
    body: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class _Claim:
    pk: int
    token: str


def parse_idempotency_key(value: str | None, *, field: str = HEADER) -> str | None:
    """``None`` when no key was sent; the key when it is 1 to 255 printable ASCII characters.

    Anything else (empty, too long, a control or non-ASCII character) is ``400 invalid_field``
    naming ``field``.
    """
    if value is None:
        return None
    if not _KEY_RE.fullmatch(value):
        raise SillError(
            f"{field} must be 1 to {KEY_MAX} printable ASCII characters.",
            code="invalid_field",
            field=field,
        )
    return value


def new_idempotency_key() -> str:
    """A fresh random key (for a rendered form)."""
    return secrets.token_urlsafe(24)


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise SillError("The JSON body is nested too deeply.", code="malformed")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _SAFE_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    # Decimal (amounts as the parser read them) and anything else: its exact text.
    return format(value, "f") if isinstance(value, Decimal) and value.is_finite() else str(value)


def request_fingerprint(*, method: str, path: str, body: Any) -> str:
    """SHA-256 (hex) of method, path and the RFC 8785 canonical JSON of the *parsed* body.

    Whitespace and key order don't change it; a different value, field or order id does.
    """
    data = _jsonable(body)
    try:
        canonical = rfc8785.dumps(data)
    except Exception:  # lone surrogates and the like: any deterministic encoding will do
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256()
    digest.update(method.upper().encode("ascii") + b"\n")
    digest.update(path.encode("utf-8", "surrogatepass") + b"\n")
    digest.update(canonical)
    return digest.hexdigest()


def purge_expired_idempotency_records(
    *, now: datetime | None = None, limit: int = PURGE_BATCH
) -> int:
    """Delete up to ``limit`` records past their ``expires_at``; returns how many went."""
    now = now or timezone.now()
    pks = list(
        IdempotencyRecord.objects.filter(expires_at__lte=now).values_list("pk", flat=True)[:limit]
    )
    if not pks:
        return 0
    deleted, _ = IdempotencyRecord.objects.filter(pk__in=pks, expires_at__lte=now).delete()
    return deleted


def _stored(record: IdempotencyRecord) -> IdempotentResponse:
    assert record.response_status is not None
    return IdempotentResponse(
        status=record.response_status, body=json.loads(record.response_body), replayed=True
    )


def _store(
    *, pk: int, token: str | None, status: int, body: dict[str, Any], without_refund: bool = False
) -> dict[str, Any] | None:
    """Mark the record done with this response if it is still in flight (and ours when
    ``token`` is given). Returns the body as stored (JSON round trip), or None if not stored."""
    text = json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False)
    records = IdempotencyRecord.objects.filter(pk=pk, state=IdempotencyState.IN_FLIGHT)
    if token is not None:
        records = records.filter(claim_token=token)
    if without_refund:
        records = records.filter(refund__isnull=True)
    stored = records.update(
        state=IdempotencyState.DONE,
        response_status=status,
        response_body=text,
        expires_at=timezone.now() + KEEP_FOR,
    )
    return json.loads(text) if stored else None


def _release(claim: _Claim) -> None:
    """Give the key back (nothing was decided), unless a refund was made under it."""
    try:
        IdempotencyRecord.objects.filter(
            pk=claim.pk,
            claim_token=claim.token,
            state=IdempotencyState.IN_FLIGHT,
            refund__isnull=True,
        ).delete()
    except DatabaseError:  # the original error matters more; the claim expires on its own
        log.exception("could not release idempotency record %s", claim.pk)


def _claim_once(
    *,
    site: Site,
    user: Any,
    key: str,
    fingerprint: str,
    respond: Callable[[Refund], dict[str, Any]],
    success_status: int,
) -> _Claim | IdempotentResponse:
    for _ in range(5):
        now = timezone.now()
        token = secrets.token_hex(16)
        try:
            with transaction.atomic():
                # An expired record no longer holds its key.
                IdempotencyRecord.objects.filter(
                    site=site, user=user, key=key, expires_at__lte=now
                ).delete()
                record = IdempotencyRecord.objects.create(
                    site=site,
                    user=user,
                    key=key,
                    fingerprint=fingerprint,
                    state=IdempotencyState.IN_FLIGHT,
                    claim_token=token,
                    claimed_at=now,
                    created_at=now,
                    expires_at=now + KEEP_FOR,
                )
        except IntegrityError:
            pass  # the key is taken: the existing record decides
        else:
            purge_expired_idempotency_records(now=now)
            return _Claim(pk=record.pk, token=token)
        existing = IdempotencyRecord.objects.filter(site=site, user=user, key=key).first()
        if existing is None:
            continue  # released in the meantime: claim again
        if existing.fingerprint != fingerprint:
            raise IdempotencyConflict(
                f"This {HEADER} was already used for a different request; nothing was done. "
                "Send a new key for a new request."
            )
        if existing.state == IdempotencyState.DONE:
            return _stored(existing)
        if existing.claimed_at > now - ABANDONED_AFTER:
            raise IdempotencyInFlight(
                f"A request with this {HEADER} is still in progress; try again in a moment."
            )
        if existing.refund_id is not None:
            # Its request died after the refund committed and before its response was stored:
            # the refund is the answer. Store it; the next pass replays it.
            refund = Refund.objects.select_related("order", "requested_by").get(
                pk=existing.refund_id
            )
            _store(pk=existing.pk, token=None, status=success_status, body=respond(refund))
            continue
        # Abandoned before anything was made: take the claim over (compare-and-set on the
        # old token, so two requests can't both take it).
        taken = IdempotencyRecord.objects.filter(
            pk=existing.pk,
            state=IdempotencyState.IN_FLIGHT,
            refund__isnull=True,
            claim_token=existing.claim_token,
        ).update(claim_token=token, claimed_at=now, expires_at=now + KEEP_FOR)
        if taken:
            return _Claim(pk=existing.pk, token=token)
    raise IdempotencyInFlight(
        f"A request with this {HEADER} is still in progress; try again in a moment."
    )


def _keeps(error: SillError) -> bool:
    """Whether a refusal is the key's answer (stored) rather than a reason to retry."""
    if isinstance(error, NothingDecided | IdempotencyInFlight | IdempotencyConflict):
        return False
    return error.code not in RETRYABLE_CODES and 400 <= error.status < 500 and error.status != 429


def run_idempotently(
    *,
    site: Site,
    user: Any,
    key: str,
    fingerprint: str,
    work: Callable[[Callable[[Refund], None]], Refund],
    respond: Callable[[Refund], dict[str, Any]],
    success_status: int,
    wait_seconds: float = 0.0,
) -> IdempotentResponse:
    """Run ``work`` at most once for ``(site, user, key)`` and answer what it answered.

    ``work(on_opened)`` makes the refund and must call ``on_opened(refund)`` inside the
    refund's transaction (``create_staff_refund(on_opened=...)`` does). ``respond(refund)`` is
    the JSON body of the answer (``success_status``). A ``SillError`` from ``work`` is raised
    again after it was stored (or the key released: see the module docstring); a replay of a
    stored refusal is returned with its status and error body, not raised.

    Raises ``IdempotencyConflict`` (422) when the key was used with another ``fingerprint``,
    ``IdempotencyInFlight`` (409) while another request holds the key; with ``wait_seconds``,
    it waits that long for the other request's answer before raising.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            claim = _claim_once(
                site=site,
                user=user,
                key=key,
                fingerprint=fingerprint,
                respond=respond,
                success_status=success_status,
            )
            break
        except IdempotencyInFlight:
            if time.monotonic() + POLL_SECONDS > deadline:
                raise
            time.sleep(POLL_SECONDS)
    if isinstance(claim, IdempotentResponse):
        return claim

    def link(refund: Refund) -> None:
        linked = IdempotencyRecord.objects.filter(
            pk=claim.pk,
            claim_token=claim.token,
            state=IdempotencyState.IN_FLIGHT,
            refund__isnull=True,
        ).update(refund=refund)
        if not linked:
            # Our claim looked abandoned and another request took it: this refund must not
            # commit (raising here rolls the refund's transaction back).
            raise IdempotencyInFlight(
                f"Another request took over this {HEADER}; nothing was done by this one."
            )

    try:
        refund = work(link)
    except SillError as error:
        if not _keeps(error) or (
            _store(
                pk=claim.pk,
                token=claim.token,
                status=error.status,
                body=error.as_dict(),
                without_refund=True,
            )
            is None
        ):
            _release(claim)
        raise
    except BaseException:
        _release(claim)
        raise
    # The refund committed (and is linked): from here on a crash is recovered from the link.
    refund = Refund.objects.select_related("order", "requested_by").get(pk=refund.pk)
    body = respond(refund)
    stored = _store(pk=claim.pk, token=claim.token, status=success_status, body=body)
    return IdempotentResponse(status=success_status, body=stored or body, replayed=False)
