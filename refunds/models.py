"""Mandates as received, and refunds as Sill decided and executed them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from treebeard.mp_tree import MP_Node

from sill.accounts.models import Agent, Site
from sill.ids import new_id
from sill.money import Money
from sill.orders.models import CURRENCY_RE, Charge, Customer, Order

# The reason services refuse longer names with a message instead of a database error.
REASON_NAME_MAX = 120


class RefundReason(MP_Node):
    """A node of the merchant's refund-reason tree; refunds pick an active leaf.

    Deleting a reason a refund used is refused by the database (``on_delete=PROTECT`` on
    ``Refund.refund_reason``); deactivate it instead.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="refund_reasons")
    name = models.CharField(max_length=REASON_NAME_MAX)
    code = models.CharField(max_length=40, blank=True)
    active = models.BooleanField(default=True)

    node_order_by = ["name"]

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "code"], condition=~Q(code=""), name="refundreason_code_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.name


def _refund_id() -> str:
    return new_id("rf")


class MandateAction(models.TextChoices):
    REQUEST_REFUND = "request_refund", "Refund request"
    PURCHASE = "purchase", "Purchase"
    CREDIT_CUSTOMER = "credit_customer", "Customer credit"


class Mandate(models.Model):
    """A verified mandate, stored verbatim with the answer Sill gave to it.

    The unique (agent, nonce) constraint is the replay guard; the unique (site, mandate_id)
    constraint makes an identical resend find its earlier answer instead of acting again.
    """

    # Both lead a unique index below ((site, mandate_id), (agent, nonce)): no index alone.
    site = models.ForeignKey(
        Site, on_delete=models.CASCADE, db_index=False, related_name="mandates"
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, db_index=False, related_name="mandates"
    )
    mandate_id = models.CharField(max_length=64)
    key_id = models.CharField(max_length=100)
    nonce = models.CharField(max_length=128)
    action = models.CharField(max_length=20, choices=MandateAction.choices)
    raw = models.BinaryField()
    body_sha256 = models.CharField(max_length=64)
    issued_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["site", "mandate_id"], name="mandate_id_unique"),
            models.UniqueConstraint(fields=["agent", "nonce"], name="mandate_nonce_unique"),
        ]

    def __str__(self) -> str:
        return self.mandate_id


class RefundOrigin(models.TextChoices):
    AGENT = "agent", "Agent"
    STAFF = "staff", "Staff"


class RefundKind(models.TextChoices):
    """What gives the money back: a refund of a charge, or a credit to the customer's balance
    at the rail (Stripe's customer balance: the customer's next invoices draw on it)."""

    REFUND = "refund", "Refund"
    CUSTOMER_CREDIT = "customer_credit", "Customer credit"


class RefundStatus(models.TextChoices):
    HELD = "held", "Held"
    PROCESSING = "processing", "Processing"
    # An attempt may have reached the rail and its outcome is unknown: the amount stays
    # reserved until the rail answers for the idempotency key, or an owner records what the
    # provider's dashboard shows (DESIGN.md: the needs_attention rule).
    NEEDS_ATTENTION = "needs_attention", "Needs attention"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


class Decision(models.TextChoices):
    APPROVED = "approved", "Approved"
    ESCALATED = "escalated", "Escalated"
    REJECTED = "rejected", "Rejected"


# Refunds that count against the one-agent-refund-per-order rule and hold or move money.
LIVE_STATUSES = (
    RefundStatus.HELD,
    RefundStatus.PROCESSING,
    RefundStatus.NEEDS_ATTENTION,
    RefundStatus.SUCCEEDED,
)
# Refunds whose amount is reserved on the charge (money may be moving).
RESERVED_STATUSES = (RefundStatus.PROCESSING, RefundStatus.NEEDS_ATTENTION)


class DecidedVia(models.TextChoices):
    SILL = "sill", "in Sill"
    SLACK = "slack", "in Slack"


class Refund(models.Model):
    # Not a column: the decision's audit record, kept by record_decision for the request that
    # wrote it (the answer's receipt reads it instead of the database).
    decision_record: Any = None

    id = models.CharField(primary_key=True, max_length=40, default=_refund_id, editable=False)
    # The site leads (site, status) and (site, -created_at), the agent refund_agent_day_idx:
    # neither has an index of its own (each would be written on every refund).
    site = models.ForeignKey(Site, on_delete=models.CASCADE, db_index=False, related_name="refunds")
    # Null only for a rejected request whose original order Sill could not find.
    order = models.ForeignKey(
        Order, on_delete=models.PROTECT, null=True, blank=True, related_name="refunds"
    )
    charge = models.ForeignKey(
        Charge, on_delete=models.PROTECT, null=True, blank=True, related_name="refunds"
    )
    origin = models.CharField(max_length=10, choices=RefundOrigin.choices)
    kind = models.CharField(
        max_length=20,
        choices=RefundKind.choices,
        default=RefundKind.REFUND,
        db_default=RefundKind.REFUND,
    )
    # A customer credit's customer (a credit names no order or charge); null for refunds,
    # whose customer is their order's.
    customer = models.ForeignKey(
        Customer, on_delete=models.PROTECT, null=True, blank=True, related_name="credits"
    )
    mandate = models.OneToOneField(
        Mandate, on_delete=models.PROTECT, null=True, blank=True, related_name="refund"
    )
    agent = models.ForeignKey(
        Agent,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        db_index=False,
        related_name="refunds",
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="requested_refunds",
    )
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    rail = models.CharField(max_length=20, blank=True)
    decision = models.CharField(max_length=12, choices=Decision.choices)
    status = models.CharField(max_length=20, choices=RefundStatus.choices)
    # Stable rejection/failure code (DESIGN.md "The refund pipeline"); blank when none. The
    # API names it ``reason``; ``sill.outcomes.OUTCOME_LABELS`` has its words.
    outcome_code = models.CharField(max_length=40, blank=True)
    reason_code = models.CharField(max_length=40, blank=True)  # the agent's stated reason
    # The merchant's reason (staff refunds), and its path and label as they were at the time.
    refund_reason = models.ForeignKey(
        RefundReason, on_delete=models.PROTECT, null=True, blank=True, related_name="refunds"
    )
    reason_path = models.CharField(max_length=500, blank=True, default="", db_default="")
    reason_label = models.CharField(max_length=120, blank=True, default="", db_default="")
    review_note = models.TextField(blank=True, default="", db_default="")
    # Set when the owners and admins were told about this hold (claimed by conditional UPDATE).
    held_notified_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)
    rules = models.JSONField(default=list, blank=True)
    facts = models.JSONField(null=True, blank=True)
    provider_refund_id = models.CharField(max_length=255, blank=True)
    failure_message = models.CharField(max_length=500, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # While set and in the future, one execution holds this refund (see refunds.execution).
    lease_until = models.DateTimeField(null=True, blank=True)
    # The fencing token of the execution holding (or last holding) the lease: a worker whose
    # token was replaced can no longer change this refund.
    lease_token = models.CharField(max_length=32, blank=True, default="", db_default="")
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    # Committed *before* the first rail call that could move money: from then on the refund
    # never fails without the rail saying, for its idempotency key, that nothing happened.
    rail_attempted_at = models.DateTimeField(null=True, blank=True)
    attention_since = models.DateTimeField(null=True, blank=True)
    # When the beat task next asks the rail about a refund that needs attention.
    next_check_at = models.DateTimeField(null=True, blank=True)
    # Owners and admins were emailed about this refund needing attention (claimed by UPDATE).
    attention_notified_at = models.DateTimeField(null=True, blank=True)
    # Hash of the audit decision record this refund executes under (settlement links to it).
    decision_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="decided_refunds",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    # Where ``decided_by`` decided a held refund: Sill's pages (or the API) or a Slack click;
    # empty when no person did (it expired, or it was never held). The review note is what
    # the person typed, not where. Its database default lets a process still running the
    # code before it insert refunds while a deploy migrates.
    decided_via = models.CharField(
        max_length=10, blank=True, choices=DecidedVia.choices, default="", db_default=""
    )
    settled_at = models.DateTimeField(null=True, blank=True)
    # When the rail reported that this settled refund failed after all (its money came back
    # to the merchant): the refund is ``failed`` from then on, and ``settled_at`` stays.
    reversed_at = models.DateTimeField(null=True, blank=True)
    # What the rail reported while this refund was still executing: its refund (this id)
    # failed or was canceled, in these words, by this event or reconciliation run. The worker
    # may hold the rail's earlier "succeeded" in memory; settling under this id reverses the
    # refund in the same transaction (refunds.services.settle_refund), so the report is not
    # lost to the race. Written and read under the refund's row lock.
    failed_at_rail_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    failed_at_rail_message = models.CharField(max_length=500, blank=True, default="", db_default="")
    failed_at_rail_source = models.CharField(max_length=255, blank=True, default="", db_default="")
    # Owners and admins were told this refund failed / failed after settlement, and the buyer
    # (a credit's customer) was sent its confirmation: each claimed by a conditional UPDATE
    # before sending, by the on-commit task or the sweep that sends what it missed
    # (refunds.tasks.notify_missed_outcomes_task). Refunds that failed or settled before these
    # columns existed were marked told (refunds 0023), not told again.
    failure_notified_at = models.DateTimeField(null=True, blank=True)
    reversal_notified_at = models.DateTimeField(null=True, blank=True)
    confirmation_sent_at = models.DateTimeField(null=True, blank=True)
    # A failed refund an owner or admin marked handled (settled another way, or not to be
    # refunded): no longer a to-do (refunds.staff.listing.open_failure). Its status stays
    # failed; the signed ``failure_handled`` record names them (refunds.staff.handled).
    failure_handled_at = models.DateTimeField(null=True, blank=True)
    failure_handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="refund_amount_gte_0"),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="refund_currency_iso"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in RefundStatus]),
                name="refund_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(decision__in=[d.value for d in Decision]),
                name="refund_decision_valid",
            ),
            models.CheckConstraint(
                condition=Q(origin__in=[o.value for o in RefundOrigin]),
                name="refund_origin_valid",
            ),
            # A credit names its customer and never an order or a charge; a refund no customer.
            models.CheckConstraint(
                condition=(
                    Q(kind="refund", customer__isnull=True)
                    | Q(kind="customer_credit", order__isnull=True, charge__isnull=True)
                ),
                name="refund_kind_valid",
            ),
            # Money moves only for a positive amount.
            models.CheckConstraint(
                condition=~Q(status__in=["processing", "needs_attention", "succeeded"])
                | Q(amount_minor__gt=0),
                name="refund_moving_amount_gt_0",
            ),
            # One agent refund per order (DESIGN.md: already_executed), backed by the database.
            models.UniqueConstraint(
                fields=["order"],
                condition=Q(origin="agent", status__in=[s.value for s in LIVE_STATUSES]),
                name="refund_one_live_agent_refund_per_order",
            ),
        ]
        indexes = [
            models.Index(fields=["site", "status"]),
            models.Index(fields=["site", "-created_at"]),
            models.Index(fields=["status", "next_check_at"]),
            # The agent's refunds today (a policy fact and the daily cap, summed on every
            # agent decision): today's rows only, from the index alone on PostgreSQL.
            models.Index(
                fields=["agent", "created_at"],
                include=["status", "currency", "amount_minor"],
                name="refund_agent_day_idx",
            ),
            # What the sweep of missed outcome emails reads every minute: only the refunds
            # not told yet (a minute's worth, or those a mail server keeps refusing), never
            # every failed or settled refund there ever was.
            models.Index(
                fields=["created_at"],
                condition=Q(
                    status="failed", reversed_at__isnull=True, failure_notified_at__isnull=True
                ),
                name="refund_failure_untold_idx",
            ),
            models.Index(
                fields=["reversed_at"],
                condition=Q(reversed_at__isnull=False, reversal_notified_at__isnull=True),
                name="refund_reversal_untold_idx",
            ),
            models.Index(
                fields=["settled_at"],
                condition=Q(status="succeeded", confirmation_sent_at__isnull=True),
                name="refund_confirmation_unsent_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def amount(self) -> Money:
        return Money(self.amount_minor, self.currency)

    @property
    def is_credit(self) -> bool:
        return self.kind == RefundKind.CUSTOMER_CREDIT

    @property
    def idempotency_key(self) -> str:
        """The key every rail call for this refund carries, on every attempt."""
        if self.is_credit:
            return f"sill-credit-{self.id}"
        return f"sill-refund-{self.id}"


class IdempotencyState(models.TextChoices):
    IN_FLIGHT = "in_flight", "In flight"
    DONE = "done", "Done"


class IdempotencyRecord(models.Model):
    """One ``Idempotency-Key`` of one member on one site, and the answer Sill gave under it.

    Claimed by INSERT before the work starts (the unique constraint is the lock), linked to the
    refund inside the refund's own transaction, and given its stored response once the refund
    committed. See ``refunds.staff.idempotency``.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="idempotency_records")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idempotency_records"
    )
    key = models.CharField(max_length=255)
    # SHA-256 (hex) of method, path and the canonical JSON of the parsed body.
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=IdempotencyState.choices)
    # Fencing token of the request working under the key: a request whose claim was taken
    # over (it looked abandoned) can no longer link a refund or store a response.
    claim_token = models.CharField(max_length=32)
    claimed_at = models.DateTimeField()
    # The refund made under this key, set in the refund's transaction: a key with a refund is
    # never taken over, so a crash between the refund and its stored response refunds once.
    refund = models.ForeignKey(
        Refund, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # The response body as the JSON text that was sent: PostgreSQL's jsonb would reorder its
    # keys, and a replay answers byte for byte the same body.
    response_body = models.TextField(blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["site", "user", "key"], name="idempotency_key_unique_per_member"
            ),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in IdempotencyState]),
                name="idempotency_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(state="in_flight") | Q(response_status__isnull=False),
                name="idempotency_done_has_response",
            ),
        ]
        indexes = [models.Index(fields=["expires_at"])]

    def __str__(self) -> str:
        return f"{self.site_id}/{self.user_id}/{self.key}"


# --- reconciliation: differences between Sill's books and the rail's ------------------------


class ReconciliationKind(models.TextChoices):
    """What kind of difference reconciliation found (refunds.reconcile.differences)."""

    MISSING_IN_SILL = "missing_in_sill", "At the rail, not in Sill"
    MISSING_AT_RAIL = "missing_at_rail", "In Sill, not at the rail"
    AMOUNT_DIFFERS = "amount_differs", "Amounts differ"
    STATUS_DIFFERS = "status_differs", "Status differs"


class ReconciliationResolution(models.TextChoices):
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    FIXED_AT_RAIL = "fixed_at_rail", "Fixed at the rail"
    RECORDED_IN_SILL = "recorded_in_sill", "Recorded in Sill"
    # Set by Sill alone: a later run found the difference gone (resolved_by stays null).
    CLEARED = "cleared", "Cleared: the difference went away"


class ReconciliationItem(models.Model):
    """One difference between Sill's books and a rail's, open until it is resolved.

    ``key`` names the difference (``"<kind>:<refund id or provider refund id>"``): the
    database allows one open item per key and site, so a second run never duplicates one.
    ``sill_corrected``: Sill brought its own books in line when it found this (it recorded a
    refund it had missed); such an item stays open until a person acknowledges it, where
    the others are cleared by Sill once a later run no longer finds them.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="reconciliation_items")
    kind = models.CharField(max_length=20, choices=ReconciliationKind.choices)
    key = models.CharField(max_length=300)
    # A charge's difference names its order and charge; a customer credit's names the
    # customer whose balance it is on (a credit has no order or charge).
    order = models.ForeignKey(
        Order, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    charge = models.ForeignKey(
        Charge, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    customer = models.ForeignKey(  # indexed by (customer, resolved_at) below
        Customer,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    refund = models.ForeignKey(
        Refund, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    rail = models.CharField(max_length=20)
    provider_refund_id = models.CharField(max_length=255, blank=True)
    currency = models.CharField(max_length=3)
    # What Sill and the rail say; null where one side has nothing.
    sill_amount_minor = models.BigIntegerField(null=True, blank=True)
    rail_amount_minor = models.BigIntegerField(null=True, blank=True)
    rail_currency = models.CharField(max_length=3, blank=True)
    sill_status = models.CharField(max_length=40, blank=True)
    rail_status = models.CharField(max_length=40, blank=True)
    detail = models.TextField()
    sill_corrected = models.BooleanField(default=False)
    found_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution = models.CharField(
        max_length=20, choices=ReconciliationResolution.choices, blank=True
    )
    resolution_note = models.TextField(blank=True)

    class Meta:
        ordering = ["found_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["site", "key"],
                condition=Q(resolved_at__isnull=True),
                name="reconitem_one_open_per_key",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in ReconciliationKind]),
                name="reconitem_kind_valid",
            ),
            # Open: no resolution. Resolved: a resolution, and a person unless Sill cleared it.
            models.CheckConstraint(
                condition=(Q(resolved_at__isnull=True) & Q(resolution=""))
                | (
                    Q(resolved_at__isnull=False)
                    & Q(resolution__in=[r.value for r in ReconciliationResolution])
                    & (Q(resolution="cleared") | Q(resolved_by__isnull=False))
                ),
                name="reconitem_resolution_consistent",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=CURRENCY_RE), name="reconitem_currency_iso"
            ),
            models.CheckConstraint(
                condition=(
                    Q(order__isnull=False, charge__isnull=False, customer__isnull=True)
                    | Q(order__isnull=True, charge__isnull=True, customer__isnull=False)
                ),
                name="reconitem_charge_or_customer",
            ),
        ]
        indexes = [
            models.Index(fields=["site", "resolved_at"]),
            models.Index(fields=["charge", "resolved_at"]),
            models.Index(fields=["customer", "resolved_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.site_id}/{self.key}"

    @property
    def is_credit(self) -> bool:
        """A customer credit's difference (no order or charge)."""
        return self.customer_id is not None

    @property
    def is_dispute(self) -> bool:
        """A dispute of the charge Sill had missed (``differences.missed_disputes``): the one
        difference of a charge that names no refund, Sill's or the rail's; its ``rail_status``
        is the rail's word for the dispute, not for a refund."""
        return not self.is_credit and self.refund_id is None and not self.provider_refund_id


# AgentRefundTotal.period: quarter-hours since the Unix epoch. Every time zone in use today
# is a whole number of quarter-hours off UTC, so each site-local midnight starts one.
PERIOD_SECONDS = 900


class AgentRefundTotal(models.Model):
    """An agent's live refunds (``LIVE_STATUSES``) by currency and by the quarter-hour they
    were created in: what the agent's refunds today sum to, read from a few rows instead of
    every refund the agent made today (``policies.facts``, the daily cap's fact).

    Kept by database triggers on ``refunds_refund`` (migration 0017), so that no write path,
    ORM ``save()``, queryset ``update()`` or hand-written SQL, can forget it. A refund created
    live adds its amount to the one ``inserted`` row of its agent, quarter-hour and currency;
    any later change of what a refund counts (it fails, expires, is rejected or reversed)
    adds a ``changed`` row of its own, minus what it counted and plus what it counts now.
    ``changed`` rows are only ever inserted: refund updates (workers, reviewers) never wait
    for the row a decision is adding to, and take no lock a decision holds, whatever order
    they lock the audit chain head in.
    """

    class Kind(models.TextChoices):
        INSERTED = "inserted", "Inserted"
        CHANGED = "changed", "Changed"

    # No database foreign key: a trigger writes these rows, also while Django deletes an
    # agent's rows in its own order; the agent's deletion still deletes them (CASCADE).
    # agent_total_period_idx starts with the agent: no index of its own.
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    period = models.BigIntegerField()  # created_at's quarter-hour since the epoch, UTC
    currency = models.CharField(max_length=3)
    amount_minor = models.BigIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "period", "currency"],
                condition=Q(kind="inserted"),
                name="agent_total_one_inserted_row",
            ),
        ]
        # No INCLUDE of the amount: a row whose indexed columns do not change is updated in
        # place (PostgreSQL's HOT update), with no new entry in any index, and the decision's
        # upsert changes only the amount.
        indexes = [models.Index(fields=["agent", "period"], name="agent_total_period_idx")]

    def __str__(self) -> str:
        return f"agent {self.agent_id}, period {self.period}: {self.amount_minor} {self.currency}"


# A reconciliation run that wrote no progress for this long has stopped without finishing. It
# writes progress after each charge; one charge's reads take seconds, a minute or two at worst
# (a few rail calls, each bounded by its timeout), and the task is killed past
# SILL_TASK_MAX_RUNTIME_SECONDS (300 s) anyway.
RUN_STOPPED_AFTER = timedelta(minutes=10)


class ReconciliationRun(models.Model):
    """One pass of reconciliation over one rail account of a site (the beat task's claim).

    A run is claimed by creating this row under the rail account's row lock, so two workers
    never start the same site's run twice within the interval; ``cursor`` is the last charge
    it checked, where the next run goes on when a site has more charges than one run takes.

    A run writes its counters, cursors and ``progress_at`` after each charge and customer. One
    with no ``finished_at`` whose last sign of life (``progress_at``, else ``started_at``) is
    older than :data:`RUN_STOPPED_AFTER` has stopped without finishing (its worker died or was
    killed): the page says so, and the next run goes on from where it got to.
    """

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="reconciliation_runs")
    rail = models.CharField(max_length=20)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    charges_checked = models.PositiveIntegerField(default=0)
    charges_unreadable = models.PositiveIntegerField(default=0)
    # Customers whose Sill credits were compared with their balance transactions (Stripe).
    customers_checked = models.PositiveIntegerField(default=0, db_default=0)
    customers_unreadable = models.PositiveIntegerField(default=0, db_default=0)
    # The last customer whose credits it checked (their pk), as ``cursor`` is for charges.
    customer_cursor = models.BigIntegerField(null=True, blank=True)
    items_opened = models.PositiveIntegerField(default=0)
    items_cleared = models.PositiveIntegerField(default=0)
    cursor = models.CharField(max_length=40, blank=True)
    # Why the run could not read the rail at all (switched off, key unreadable), or "".
    error = models.CharField(max_length=500, blank=True)
    # When it last wrote its progress (after each charge or customer); null before the first.
    progress_at = models.DateTimeField(null=True, blank=True)
    # It finished early, its time used up (SILL_RECONCILE_MAX_SECONDS, or the task's soft
    # limit): the charges after ``cursor`` are the next run's.
    out_of_time = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["site", "rail", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.site_id}/{self.rail} run at {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def stopped(self) -> bool:
        """Unfinished, and silent for longer than any one charge's read takes: its worker is
        gone (killed, restarted, past the task's time limit)."""
        if self.finished_at is not None:
            return False
        alive_at = self.progress_at or self.started_at
        return alive_at <= timezone.now() - RUN_STOPPED_AFTER
