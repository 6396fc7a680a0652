"""The mock rail: a real, deterministic provider for development, demos and tests.

Its provider state is ``MockLedgerEntry`` (the provider's database) so that, like Stripe, it
remembers what it did across processes: the same idempotency key returns the same result,
and ``find_refund`` finds a refund whose response was lost.

Scripting, from ``RailAccount.config``::

    {"charge": "succeed" | "decline" | "timeout",
     "refund": "succeed" | "decline" | "timeout" | "timeout_after_effect" | "rate_limited"
               | "error_after_effect",
     "lookup": "succeed" | "fail" | "reject",   # how find_refund answers
     "fail_times": N,        # only the first N calls per idempotency key follow the script
     "delay_seconds": 1.5}   # sleep before answering, after recording

``decline`` → ``PermanentRailError``; ``timeout`` → ``AmbiguousRailError`` and nothing
recorded; ``timeout_after_effect`` → the refund is recorded, then ``AmbiguousRailError`` (the
response was lost); ``rate_limited`` → ``RetryableRailError``; ``error_after_effect`` → the
refund is recorded, then a ``RuntimeError`` (a bug or a library error after the provider
acted). ``{"lookup": "fail"}`` makes ``find_refund`` time out (``AmbiguousRailError``),
``{"lookup": "reject"}`` refuse for good (``PermanentRailError``, like a rotated or restricted
key). ``{"facts": "fail"}`` makes ``read_refund_facts`` fail (``RetryableRailError``),
``{"facts": "no_customers"}`` answers like a key that cannot read customers (no customer age,
no history). A payment method containing
``chargeDeclined`` (e.g. ``pm_card_visa_chargeDeclined``) is declined, as on Stripe.

Ledger writes are committed with the caller's connection: call rails outside
``transaction.atomic()`` (as Sill does), or a rollback also erases the "provider's" record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum

from sill import sql
from sill.ids import new_ulid
from sill.money import Money
from sill.rails.base import (
    AmbiguousRailError,
    ChargeRequest,
    ChargeResult,
    CustomerHistory,
    PermanentRailError,
    RateLimited,
    RefundFacts,
    RefundFactsRequest,
    RefundRequest,
    RefundResult,
    RetryableRailError,
)
from sill.rails.models import MockCallCount, MockEntryKind, MockLedgerEntry
from sill.sql import cols, fetch_row, placeholders

CHARGE_SCRIPTS = frozenset({"succeed", "decline", "timeout", "timeout_after_effect"})
REFUND_SCRIPTS = frozenset(
    {"succeed", "decline", "timeout", "timeout_after_effect", "rate_limited", "error_after_effect"}
)
LOOKUP_SCRIPTS = frozenset({"succeed", "fail", "reject"})


class MockRail:
    name = "mock"

    def __init__(self, *, site_id: str, config: Mapping[str, Any] | None = None) -> None:
        self.site_id = site_id
        self.config = dict(config or {})
        self._charge_script = str(self.config.get("charge", "succeed"))
        self._refund_script = str(self.config.get("refund", "succeed"))
        if self._charge_script not in CHARGE_SCRIPTS:
            raise ValueError(f"unknown mock charge script {self._charge_script!r}")
        if self._refund_script not in REFUND_SCRIPTS:
            raise ValueError(f"unknown mock refund script {self._refund_script!r}")
        self._lookup_script = str(self.config.get("lookup", "succeed"))
        if self._lookup_script not in LOOKUP_SCRIPTS:
            raise ValueError(f"unknown mock lookup script {self._lookup_script!r}")
        fail_times = self.config.get("fail_times")
        self._fail_times = None if fail_times is None else int(fail_times)
        self._delay = float(self.config.get("delay_seconds", 0) or 0)

    def __repr__(self) -> str:
        return f"MockRail(site_id={self.site_id!r}, config={self.config!r})"

    # --- charges ------------------------------------------------------------------------

    def charge(self, request: ChargeRequest) -> ChargeResult:
        script = self._script(MockEntryKind.CHARGE, request.idempotency_key, self._charge_script)
        if script == "timeout":
            self._answer()
            raise AmbiguousRailError("mock rail: the charge timed out (scripted)")
        if script == "decline" or "chargeDeclined" in request.payment_method:
            self._answer()
            raise PermanentRailError("mock rail: the card was declined")

        entry = self._existing(request.idempotency_key)
        if entry is None:
            entry = self._record(
                kind=MockEntryKind.CHARGE,
                idempotency_key=request.idempotency_key,
                provider_id=f"mock_pi_{new_ulid()}",
                amount=request.amount,
                provider_charge_id=f"mock_ch_{new_ulid()}",
                metadata={"sill_order_id": request.order_id},
            )
        self._check_same(entry, MockEntryKind.CHARGE, request.amount)
        self._answer()
        if script == "timeout_after_effect":
            raise AmbiguousRailError("mock rail: the charge was made but the response was lost")
        return ChargeResult(
            provider_payment_id=entry.provider_id,
            provider_charge_id=entry.provider_charge_id,
            captured_at=entry.created_at,
        )

    def find_charge(self, request: ChargeRequest) -> ChargeResult | None:
        """The charge made earlier under ``request``'s idempotency key (the mock records only
        charges that took money: a declined or timed-out call leaves nothing to find)."""
        entry = self._existing(request.idempotency_key)
        if entry is None or entry.kind != MockEntryKind.CHARGE:
            return None
        return ChargeResult(
            provider_payment_id=entry.provider_id,
            provider_charge_id=entry.provider_charge_id,
            captured_at=entry.created_at,
        )

    # --- refunds ------------------------------------------------------------------------

    def refund(self, request: RefundRequest) -> RefundResult:
        script = self._script(MockEntryKind.REFUND, request.idempotency_key, self._refund_script)
        if script == "timeout":
            self._answer()
            raise AmbiguousRailError("mock rail: the refund timed out (scripted)")
        if script == "rate_limited":
            self._answer()
            raise RateLimited("mock rail: rate limited (scripted)")
        if script == "decline":
            self._answer()
            raise PermanentRailError("mock rail: the refund was declined (scripted)")

        entry = self._existing(request.idempotency_key) or self._record_refund(request)
        self._check_same(entry, MockEntryKind.REFUND, request.amount, request.provider_charge_id)
        self._answer()
        if script == "timeout_after_effect":
            raise AmbiguousRailError("mock rail: the refund was made but the response was lost")
        if script == "error_after_effect":
            raise RuntimeError("mock rail: the refund was made, then the client crashed")
        return _refund_result(entry)

    def find_refund(self, request: RefundRequest) -> RefundResult | None:
        if self._lookup_script == "fail":
            self._answer()
            raise AmbiguousRailError("mock rail: the refund lookup timed out (scripted)")
        if self._lookup_script == "reject":
            raise PermanentRailError(
                "mock rail: the API key was rejected (scripted)", code="rail_auth_failed"
            )
        entry = self._existing(request.idempotency_key)
        if entry is None or entry.kind != MockEntryKind.REFUND:
            return None
        return _refund_result(entry)

    def _record_refund(self, request: RefundRequest) -> MockLedgerEntry:
        amount = request.amount
        if amount.amount_minor <= 0:
            raise PermanentRailError("mock rail: a refund amount must be positive")
        with transaction.atomic():
            # Lock the charge so two refunds under different keys cannot both pass the check
            # (PostgreSQL; SQLite's IMMEDIATE transactions serialise writers anyway).
            charge = (
                MockLedgerEntry.objects.select_for_update()
                .filter(
                    site_id=self.site_id,
                    kind=MockEntryKind.CHARGE,
                    provider_charge_id=request.provider_charge_id,
                )
                .first()
            )
            # A charge the mock never made (demo data) has no known amount: allow.
            if charge is not None:
                if charge.currency != amount.currency:
                    raise PermanentRailError(
                        f"mock rail: the charge is in {charge.currency}, not {amount.currency}"
                    )
                refunded = (
                    MockLedgerEntry.objects.filter(
                        site_id=self.site_id,
                        kind=MockEntryKind.REFUND,
                        provider_charge_id=request.provider_charge_id,
                    ).aggregate(total=Sum("amount_minor"))["total"]
                    or 0
                )
                if refunded + amount.amount_minor > charge.amount_minor:
                    remaining = Money(charge.amount_minor - refunded, charge.currency)
                    raise PermanentRailError(
                        f"mock rail: refund of {amount} exceeds the {remaining} left on the charge"
                    )
            return self._record(
                kind=MockEntryKind.REFUND,
                idempotency_key=request.idempotency_key,
                provider_id=f"mock_re_{new_ulid()}",
                amount=amount,
                provider_charge_id=request.provider_charge_id,
                metadata={
                    **request.metadata,
                    "sill_refund_id": request.refund_id,
                    "sill_idempotency_key": request.idempotency_key,
                },
            )

    # --- facts for the policy engine ---------------------------------------------------

    def read_refund_facts(self, request: RefundFactsRequest) -> RefundFacts:
        """The facts a provider would report, read from Sill's own records of this site.

        The mock has no customer or charge database of its own: Sill's ``Charge``,
        ``Customer`` and ``Dispute`` rows play that part. The history is read the way Stripe
        pages it (newest first, one page of ``history_limit`` whatever the currency), so
        truncation behaves the same on both rails.
        """
        from sill.orders.models import (
            REFUND_BLOCKING_DISPUTE_STATUSES,
            Charge,
            ChargeStatus,
            Customer,
        )

        script = str(self.config.get("facts", "succeed"))
        if script == "fail":
            self._answer()
            raise RetryableRailError("mock rail: facts unavailable (scripted)")
        # The charge and whether it is disputed in one query, hand-written (sill.sql): every
        # decision on a mock charge reads it.
        charge = cols(Charge, "c", only=("captured_at", "created_at"))
        disputes = placeholders(REFUND_BLOCKING_DISPUTE_STATUSES)
        if request.sill_charge_id:
            column, value = "c.id", request.sill_charge_id
        else:
            column, value = "c.provider_charge_id", request.provider_charge_id
        row = fetch_row(
            f"""SELECT {charge.sql},
                EXISTS (SELECT 1 FROM orders_dispute d
                        WHERE d.charge_id = c.id AND d.status IN ({disputes}))
            FROM orders_charge c
            JOIN orders_order o ON o.id = c.order_id
            WHERE o.site_id = %s AND {column} = %s
            ORDER BY c.created_at
            LIMIT 1""",  # noqa: S608  (formatted in: a column list, a column, placeholders)
            [*sorted(REFUND_BLOCKING_DISPUTE_STATUSES), self.site_id, value],
        )
        facts = RefundFacts()
        if row is not None:
            found = charge.build(row)
            facts = RefundFacts(
                charge_created_at=found.captured_at or found.created_at,
                charge_disputed=bool(row[len(charge)]),
            )
        if script == "no_customers":
            return facts
        # The customer, then its page of history: hand-written too (sill.sql), as every
        # decision on a customer's order reads them.
        customer_key: int | str
        if request.sill_customer_id is not None:
            by, customer_key = "cu.id", request.sill_customer_id
        elif request.provider_customer_id:
            by, customer_key = "cu.rail_customer_id", request.provider_customer_id
        else:
            return facts
        found_customer = cols(Customer, "cu", only=("provider_created_at", "created_at"))
        row = fetch_row(
            f"""SELECT {found_customer.sql} FROM orders_customer cu
            WHERE cu.site_id = %s AND {by} = %s
            ORDER BY cu.id
            LIMIT 1""",  # noqa: S608  (formatted in: a column list and a column)
            [self.site_id, customer_key],
        )
        if row is None:
            return facts
        customer = found_customer.build(row)
        with sql.cursor() as cursor:
            cursor.execute(
                """SELECT c.currency, c.amount_refunded_minor FROM orders_charge c
                JOIN orders_order o ON o.id = c.order_id
                WHERE o.site_id = %s AND o.customer_id = %s AND c.status = %s
                    AND COALESCE(c.captured_at, c.created_at) >= %s
                ORDER BY COALESCE(c.captured_at, c.created_at) DESC, c.id DESC
                LIMIT %s""",
                [
                    self.site_id,
                    customer.pk,
                    ChargeStatus.SUCCEEDED,
                    connection.ops.adapt_datetimefield_value(request.history_since),
                    request.history_limit + 1,
                ],
            )
            page = cursor.fetchall()
        truncated = len(page) > request.history_limit
        refunded = [
            minor
            for currency, minor in page[: request.history_limit]
            if currency == request.currency and minor > 0
        ]
        return RefundFacts(
            charge_created_at=facts.charge_created_at,
            charge_disputed=facts.charge_disputed,
            customer_created_at=customer.provider_created_at or customer.created_at,
            history=CustomerHistory(
                refunded_charges=len(refunded),
                refunded_minor=sum(refunded),
                truncated=truncated,
            ),
        )

    # --- the ledger ---------------------------------------------------------------------

    def _existing(self, idempotency_key: str) -> MockLedgerEntry | None:
        return MockLedgerEntry.objects.filter(
            site_id=self.site_id, idempotency_key=idempotency_key
        ).first()

    def _record(
        self,
        *,
        kind: str,
        idempotency_key: str,
        provider_id: str,
        amount: Money,
        provider_charge_id: str,
        metadata: dict[str, str],
    ) -> MockLedgerEntry:
        try:
            with transaction.atomic():
                return MockLedgerEntry.objects.create(
                    site_id=self.site_id,
                    kind=kind,
                    idempotency_key=idempotency_key,
                    provider_id=provider_id,
                    amount_minor=amount.amount_minor,
                    currency=amount.currency,
                    provider_charge_id=provider_charge_id,
                    metadata=metadata,
                )
        except IntegrityError:
            # A concurrent call with the same key won the insert: answer with its entry.
            entry = self._existing(idempotency_key)
            if entry is None:
                raise
            return entry

    @staticmethod
    def _check_same(
        entry: MockLedgerEntry, kind: str, amount: Money, provider_charge_id: str | None = None
    ) -> None:
        # Stripe answers a reused key with other parameters with an idempotency_error.
        if (
            entry.kind != kind
            or entry.amount_minor != amount.amount_minor
            or entry.currency != amount.currency
            or (provider_charge_id is not None and entry.provider_charge_id != provider_charge_id)
        ):
            raise PermanentRailError("mock rail: idempotency key reused with different parameters")

    def _script(self, operation: str, idempotency_key: str, script: str) -> str:
        """The scripted behaviour for this call: ``succeed`` once ``fail_times`` are used up."""
        if script == "succeed" or self._fail_times is None:
            return script
        with transaction.atomic():
            counter, _ = MockCallCount.objects.get_or_create(
                site_id=self.site_id, operation=operation, idempotency_key=idempotency_key
            )
            MockCallCount.objects.filter(pk=counter.pk).update(calls=F("calls") + 1)
            counter.refresh_from_db(fields=["calls"])
        return script if counter.calls <= self._fail_times else "succeed"

    def _answer(self) -> None:
        if self._delay > 0:
            time.sleep(self._delay)


def _refund_result(entry: MockLedgerEntry) -> RefundResult:
    return RefundResult(
        provider_refund_id=entry.provider_id,
        state="succeeded",
        amount=Money(entry.amount_minor, entry.currency),
    )
